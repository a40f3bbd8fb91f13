"""Term histories (seed 003): a log as a list of (term, start LSN) pairs, and what follows from
comparing two of them. Pure functions, so the proposer and the safekeeper agree by construction.

A history entry [t, s] says that the records from LSN s up to the next entry's start were written
by the proposer of term t. Two logs that both contain term t agree on t's records, because a term
has one proposer; so they agree up to the end of the last term they share, and diverge there.
"""

from __future__ import annotations

History = list[list[int]]  # [[term, start_lsn], ...], terms and starts increasing


def upto(history: History, flush: int) -> History:
    """The part of `history` that a log ending at `flush` really holds: terms with at least one
    byte below `flush` (a term announced but not yet written is not the log's)."""
    return [list(e) for e in history if e[1] < flush]


def last_term(history: History, flush: int) -> int:
    held = upto(history, flush)
    return held[-1][0] if held else 0


def term_end(history: History, index: int, end: int) -> int:
    return history[index + 1][1] if index + 1 < len(history) else end


def divergence(theirs: History, their_flush: int, ours: History, our_end: int) -> int:
    """The LSN up to which a log (`theirs`, ending at `their_flush`) agrees with ours.

    It is the end of the last term both hold, taken in whichever log ends that term first; with no
    common term nothing agrees but what precedes our first record."""
    held = upto(theirs, their_flush)
    our_terms = {term: i for i, (term, _) in enumerate(ours)}
    for i in range(len(held) - 1, -1, -1):
        j = our_terms.get(held[i][0])
        if j is not None:
            return min(term_end(held, i, their_flush), term_end(ours, j, our_end))
    return ours[0][1] if ours else 0


def quorum_position(positions: list[int], total: int) -> int:
    """The highest LSN that a majority of `total` acceptors holds, given the positions of those
    that answered (the missing ones count as nothing)."""
    quorum = total // 2 + 1
    padded = sorted(positions + [0] * (total - len(positions)), reverse=True)
    return padded[quorum - 1]
