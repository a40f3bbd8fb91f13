"""Texts between Arrow arrays and Python in bulk: JSON texts to and from msgspec, millions of
values in one buffer each way, not one Python object at a time; and a column of a few distinct
texts as a numpy array that holds each of them once."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMPTY, _COMMA = pa.scalar("", pa.large_string()), pa.scalar(",", pa.large_string())


def joined_array(texts: pa.Array) -> bytes:
    """The JSON texts (no nulls) as the text of one JSON array of them, for one decode."""
    if not len(texts):
        return b"[]"
    # each text with a comma after it, one after the other in one buffer
    joined = pc.binary_join_element_wise(texts.cast(pa.large_string()), _EMPTY, _COMMA)
    _, offsets, data = joined.buffers()
    bounds = np.frombuffer(offsets, np.int64)[joined.offset :][[0, len(joined)]]
    return b"".join((b"[", memoryview(data)[bounds[0] : bounds[1] - 1], b"]"))


def raw_texts(raws: Sequence[msgspec.Raw], listed: bytes | None = None) -> pa.Array:
    """The raw JSON texts as a large string array; `listed`: msgspec's encoding of `raws`, when
    the caller has it already."""
    if listed is None:
        listed = msgspec.json.encode(raws)  # "[" the texts, each followed by "," or "]"
    bounds = np.ones(len(raws) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, raws), np.int64, len(raws)) + 1, out=bounds[1:])
    bounds[1:] += 1
    # each text with the "," or "]" after it, then without
    texts = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(raws), [None, pa.py_buffer(bounds), pa.py_buffer(listed)]
    )
    return pc.binary_slice(texts, 0, -1).cast(pa.large_string())


def text_objects(texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The texts as a numpy object array (None for a null) through their dictionary: each
    distinct text one Python object, where Arrow's own conversion makes one per row (ten
    million rows of a few distinct texts were over half a gigabyte a column)."""
    coded = pc.dictionary_encode(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray)
                                 else texts)  # fmt: skip
    words = np.array([*coded.dictionary.to_pylist(), None], dtype=object)
    return words[pc.fill_null(coded.indices, len(words) - 1).to_numpy(zero_copy_only=False)]
