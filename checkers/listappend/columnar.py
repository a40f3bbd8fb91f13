"""keys.py's per-key analysis over arrays, for the usual key: many keys at once, no object per
access.

A large history is almost all clean keys: every read a prefix of the longest, no element appended
twice, no failed append read, nothing for any case to find. For such a key the analysis is only
its ww/wr/rw edges, and those follow from positions in the version order, which numpy computes
for all keys together. This module finds which keys are such (a quick test per case of keys.py,
each exact: a key it passes has no case in keys.analyze nor in split_brain.analyze) and their
edges, in the order keys.analyze gives them. Every other key (a possible case, or an argument
the arrays do not hold) is left to keys.py: the caller builds its accesses and runs it there.

The rows are micro-operations sorted by key, transaction and position, as columns:
`key` (an integer id per key, the rows of a key together), `txn`, `type` (TYPE_CODES), `start`,
`end` (`END_UNKNOWN` for none), `read` (else an append), `plain` (the row's argument is held by
the arrays: an append's integer element, or a read's list of integers or, for a read, no list),
`element` (an append's), `length` (a read's list's length, NO_LIST for a read of no list) and
`values` (the lists' elements, read after read, for the reads with a list, in row order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checkers.listappend.graph import RW, WR, WW

OK, INFO, FAIL = 0, 1, 2  # type codes: a type neither ok nor fail counts as info, as in keys.py
TYPE_CODES = {"ok": OK, "info": INFO, "fail": FAIL}
END_UNKNOWN = np.iinfo(np.int64).min
NO_LIST = -1  # a read's length when it read no list
_SPAN = np.int64(1) << 40  # apart enough for a key's positions (or an access's lengths)


@dataclass
class Rows:
    """The micro-operations of some whole keys, as the module's docstring says."""

    key: np.ndarray
    txn: np.ndarray
    type: np.ndarray
    start: np.ndarray
    end: np.ndarray
    read: np.ndarray
    plain: np.ndarray
    element: np.ndarray
    length: np.ndarray
    values: np.ndarray


@dataclass
class Result:
    """Per key id: whether keys.py must analyse it; for the others, their edges, key by key."""

    python: np.ndarray  # bool per key id
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    edge_key: np.ndarray  # the key id of each edge, nondecreasing


def analyse(rows: Rows) -> Result:
    """The keys keys.py must see, and the edges of the others."""
    n = len(rows.key)
    keys = int(rows.key[-1]) + 1 if n else 0
    if not n:
        empty = np.zeros(0, np.int64)
        return Result(np.zeros(0, bool), empty, empty, empty.astype(np.int8), empty)
    key, txn, typ, read = rows.key, rows.txn, rows.type, rows.read
    append = ~read
    bad = np.zeros(keys, bool)  # keys left to keys.py

    def flag(rows_mask: np.ndarray) -> None:
        bad[key[rows_mask]] = True

    flag(~rows.plain)
    listed = read & (rows.length >= 0)
    flag(read & (typ == OK) & ~listed)  # an ok read of no list: keys.py skips it, unlike these

    # each read's list as a slice of `values`
    lengths = np.where(listed, rows.length, 0)
    offsets = np.cumsum(lengths) - lengths
    # the reads keys.py's Versions counts: by ok and info transactions, of a list
    counted = listed & (typ != FAIL)

    # the longest read of each key (the first of the longest): the key's version order
    cand = np.flatnonzero(counted)
    by = np.lexsort((cand, -rows.length[cand], key[cand]))
    cand = cand[by]
    first = np.ones(len(cand), bool)
    first[1:] = key[cand[1:]] != key[cand[:-1]]
    longest_row = np.full(keys, -1, np.int64)
    longest_row[key[cand[first]]] = cand[first]
    order_len = np.where(longest_row >= 0, rows.length[np.maximum(longest_row, 0)], 0)
    order_len = np.maximum(order_len, 0)
    order_off = np.cumsum(order_len) - order_len  # each key's order within `order`
    has = longest_row >= 0
    order = _gather(rows.values, offsets[longest_row[has]], order_len[has])

    # every counted read a prefix of the order (its elements at the order's positions)
    at = _gather(np.arange(len(rows.values)), offsets[counted], lengths[counted])
    within = at - np.repeat(offsets[counted], lengths[counted])
    reader_key = np.repeat(key[counted], lengths[counted])
    mismatch = rows.values[at] != order[order_off[reader_key] + within]
    bad[reader_key[mismatch]] = True

    # and the order repeats no element; positions by (key, element), through dense codes
    order_key = np.repeat(np.arange(keys), order_len)
    elements, codes = np.unique(np.concatenate([order, rows.element[append]]), return_inverse=True)
    width = np.int64(len(elements) + 1)
    order_code = order_key * width + codes[: len(order)]
    sorted_at = np.argsort(order_code, kind="stable")
    sorted_codes = order_code[sorted_at]
    repeated = sorted_codes[1:] == sorted_codes[:-1]
    bad[order_key[sorted_at[1:][repeated]]] = True

    # each append's position in its key's order, or -1 for an element never read
    appends = np.flatnonzero(append)
    a_key = key[appends]
    a_code = a_key * width + codes[len(order) :]
    found, hit = _lookup(sorted_codes, a_code)
    a_pos = np.full(len(appends), -1, np.int64)
    a_pos[hit] = sorted_at[found[hit]] - order_off[a_key[hit]]
    position = np.full(n, -1, np.int64)
    position[appends] = a_pos

    # no element appended twice (keys.py keeps one writer per element); no failed append read
    appended = np.sort(a_code)
    twice = appended[1:] == appended[:-1]
    bad[(appended[1:][twice] // width)] = True
    flag(append & (typ == FAIL) & (position >= 0))

    access, first_row = _accesses(key, txn)
    _intermediate(rows, bad, access, position)
    _within_transactions(rows, bad, access, first_row, position)
    _may_lose(rows, bad, position, order_len)

    src, dst, kinds, made_at = _edges(rows, position, order_len, order_off, counted)
    keep = ~bad[key[made_at]]
    src, dst, kinds, made_at = src[keep], dst[keep], kinds[keep], made_at[keep]
    return Result(bad, src, dst, kinds.astype(np.int8), key[made_at])


def _lookup(sorted_codes: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each query stands in the sorted codes, and whether it is there."""
    if not len(sorted_codes):
        return np.zeros(len(queries), np.int64), np.zeros(len(queries), bool)
    at = np.minimum(np.searchsorted(sorted_codes, queries), len(sorted_codes) - 1)
    return at, sorted_codes[at] == queries


def _gather(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """values[s : s + c] for each (s, c), one after the other."""
    total = int(counts.sum())
    if not total:
        return values[:0]
    base = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return values[base + np.arange(total)]


def _accesses(key: np.ndarray, txn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's access (a transaction's rows of one key) and each access's first row."""
    new = np.ones(len(key), bool)
    new[1:] = (key[1:] != key[:-1]) | (txn[1:] != txn[:-1])
    return np.cumsum(new) - 1, np.flatnonzero(new)


def _edges(
    rows: Rows,
    position: np.ndarray,
    order_len: np.ndarray,
    order_off: np.ndarray,
    counted: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """keys.py's _edges for every key: (src, dst, kind, the row that made each edge), in its
    order (row by row; at an append its ww edge, then its rw edges in the readers' order), each
    edge once per key."""
    key, txn, typ = rows.key, rows.txn, rows.type
    # the writer of each position of each order: an ok or info transaction, or -1
    writer = np.full(int(order_len.sum()), -1, np.int64)
    wrote = ~rows.read & (typ != FAIL) & (position >= 0)
    writer[order_off[key[wrote]] + position[wrote]] = txn[wrote]

    graphed_appends = np.flatnonzero(~rows.read & (typ != FAIL))
    g_key = key[graphed_appends]
    pos = position[graphed_appends]
    previous = np.where(pos >= 0, pos - 1, order_len[g_key] - 1)  # -1: the empty list

    parts: list[tuple[np.ndarray, ...]] = []
    # ww: the writer of the previous version
    prior = previous >= 0
    w = np.full(len(graphed_appends), -1, np.int64)
    w[prior] = writer[order_off[g_key[prior]] + previous[prior]]
    ok = (w >= 0) & (w != txn[graphed_appends])
    parts.append((w[ok], txn[graphed_appends][ok], WW, graphed_appends[ok], 0))

    # rw: every reader of the previous version (readers of the empty list for -1)
    readers = np.flatnonzero(counted)
    state = rows.length[readers] - 1  # the position of the read's last element
    r_code = key[readers] * _SPAN + state + 1
    by = np.argsort(r_code, kind="stable")  # readers of a state in row order
    r_sorted = r_code[by]
    q_code = g_key * _SPAN + previous + 1
    lo = np.searchsorted(r_sorted, q_code, "left")
    hi = np.searchsorted(r_sorted, q_code, "right")
    count = hi - lo
    which = by[_gather(np.arange(len(by)), lo, count)]
    rank = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    at = np.repeat(graphed_appends, count)
    r_txn = txn[readers[which]]
    ok = r_txn != txn[at]
    parts.append((r_txn[ok], txn[at][ok], RW, at[ok], 1 + rank[ok]))

    # wr: the writer of a non-empty read's last element
    nonempty = readers[rows.length[readers] > 0]
    w = writer[order_off[key[nonempty]] + rows.length[nonempty] - 1]
    ok = (w >= 0) & (w != txn[nonempty])
    parts.append((w[ok], txn[nonempty][ok], WR, nonempty[ok], 0))

    src = np.concatenate([p[0] for p in parts])
    dst = np.concatenate([p[1] for p in parts])
    kind = np.concatenate([np.full(len(p[0]), p[2], np.int64) for p in parts])
    row = np.concatenate([p[3] for p in parts])
    sub = np.concatenate([np.broadcast_to(p[4], len(p[0])) for p in parts])
    by = np.lexsort((sub, row))
    src, dst, kind, row = src[by], dst[by], kind[by], row[by]
    # each edge once per key: the first of equal ones
    same = np.lexsort((np.arange(len(src)), kind, dst, src, key[row]))
    repeat = np.zeros(len(src), bool)
    equal = np.ones(max(len(src) - 1, 0), bool)
    for column in (key[row], src, dst, kind):
        ordered = column[same]
        equal &= ordered[1:] == ordered[:-1]
    repeat[same[1:][equal]] = True
    keep = ~repeat
    return src[keep], dst[keep], kind[keep], row[keep]


def _intermediate(rows: Rows, bad: np.ndarray, access: np.ndarray, position: np.ndarray) -> None:
    """G1b's test: an ok read ends where an append overwritten in its own transaction by a later
    append to the key stands (the later append in the same access)."""
    key, read = rows.key, rows.read
    appends = np.flatnonzero(~read)
    if not len(appends):
        return
    # an append followed by another in its access: the next append row is in the same access
    later = np.zeros(len(appends), bool)
    later[:-1] = access[appends[1:]] == access[appends[:-1]]
    over = appends[later & (position[appends] >= 0)]
    code = key[over] * _SPAN + position[over]
    by = np.argsort(code, kind="stable")
    code, writer = code[by], rows.txn[over][by]
    reads = np.flatnonzero(read & (rows.type == OK) & (rows.length > 0))
    at, hit = _lookup(code, key[reads] * _SPAN + rows.length[reads] - 1)
    hit &= writer[at] != rows.txn[reads] if len(code) else hit
    bad[key[reads[hit]]] = True


def _within_transactions(
    rows: Rows, bad: np.ndarray, access: np.ndarray, first_row: np.ndarray, position: np.ndarray
) -> None:
    """The tests of the cases within one ok transaction (for a clean key, a read is its order's
    prefix of its length, so each test is one of lengths and positions):
    - internal: after a read of length L and m appends, the next read has length L + m and
      the appends stood at L…L+m-1; with no read before, m appends then a read of length R
      stood at R-m…R-1;
    - future-read: an append of an element an earlier read of the transaction held;
    - lost-update: two transactions whose first read of the key has the same length, each
      appending after it."""
    key, read, typ, length = rows.key, rows.read, rows.type, rows.length
    n = len(key)
    idx = np.arange(n)
    in_ok = typ == OK
    start_of = first_row[access]  # each row's access's first row
    # the last read at or before each row, and the appends so far, within its access
    last_read = np.maximum.accumulate(np.where(read, idx, -1))
    last_read = np.where(last_read >= start_of, last_read, -1)
    appends_so_far = np.cumsum(~read)
    before_access = np.where(start_of > 0, appends_so_far[np.maximum(start_of - 1, 0)], 0)
    appends_so_far = appends_so_far - before_access  # within the access, this row included
    prior_read = np.full(n, -1, np.int64)  # the last read strictly before the row
    prior_read[1:] = last_read[:-1]
    prior_read = np.where(prior_read >= start_of, prior_read, -1)

    def since(r: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Appends after read p (or the access's start) up to row r."""
        return appends_so_far[r] - np.where(p >= 0, appends_so_far[np.maximum(p, 0)], 0)

    # internal, at reads: the length
    reads = np.flatnonzero(read & in_ok & (idx > start_of))
    p = prior_read[reads]
    m = since(reads, p)
    known = p >= 0
    wrong = np.where(known, length[reads] != length[np.maximum(p, 0)] + m, length[reads] < m)
    bad[key[reads[wrong]]] = True
    # internal, at appends followed by a read in their access: the position
    nxt = np.minimum.accumulate(np.where(read, idx, n)[::-1])[::-1]
    ends_at = np.append(first_row[1:], n)[access]  # each row's access's end
    appends = np.flatnonzero(~read & in_ok & (nxt < ends_at))
    p = prior_read[appends]
    r = nxt[appends]
    base = np.where(p >= 0, length[np.maximum(p, 0)], length[r] - since(r, p))
    i = since(appends, p)
    bad[key[appends[position[appends] != base + i - 1]]] = True

    # future-read: the longest read before the append within its access
    longest = np.maximum.accumulate(np.where(read, access * _SPAN + np.maximum(length, 0), 0))
    longest_before = np.full(n, 0, np.int64)
    longest_before[1:] = longest[:-1] - access[1:] * _SPAN
    longest_before = np.maximum(longest_before, 0)
    future = ~read & in_ok & (position >= 0) & (position < longest_before)
    bad[key[future]] = True

    # lost-update: the first read of each ok access with an append after it
    first_read = read & in_ok & (prior_read < 0)
    firsts = np.flatnonzero(first_read)
    total = appends_so_far[ends_at[firsts] - 1]
    after = total > since(firsts, np.full(len(firsts), -1))
    firsts = firsts[after]
    code = np.sort(key[firsts] * _SPAN + length[firsts])
    bad[(code[1:][code[1:] == code[:-1]] // _SPAN)] = True


def _may_lose(rows: Rows, bad: np.ndarray, position: np.ndarray, order_len: np.ndarray) -> None:
    """keys.py's _may_lose for every key: some ok read began after an append was acknowledged
    whose element lies beyond the read (or outside the order). A key it passes has no
    lost-append case and no split-brain case (an unseen append is one such read)."""
    key, typ = rows.key, rows.type
    acked = np.flatnonzero(~rows.read & (typ == OK) & (rows.end != END_UNKNOWN))
    reads = np.flatnonzero(rows.read & (typ == OK) & (rows.length >= 0))
    if not len(acked) or not len(reads):
        return
    a_key, r_key = key[acked], key[reads]
    a_pos = np.where(position[acked] >= 0, position[acked], order_len[a_key])
    # acknowledgements and read starts in one timeline per key; a read before an
    # acknowledgement at its very time (bisect_left: the ends before the start)
    ev_key = np.concatenate([a_key, r_key])
    ev_time = np.concatenate([rows.end[acked], rows.start[reads]])
    ev_ack = np.concatenate([np.ones(len(acked), bool), np.zeros(len(reads), bool)])
    value = np.concatenate([a_key * _SPAN + a_pos, r_key * _SPAN - 1])
    by = np.lexsort((ev_ack, ev_time, ev_key))
    furthest = np.maximum.accumulate(value[by]) - ev_key[by] * _SPAN
    is_read = ~ev_ack[by]
    which = by[is_read] - len(acked)
    lost = furthest[is_read] >= rows.length[reads[which]]
    bad[r_key[which[lost]]] = True
