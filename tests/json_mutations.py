"""Mutations of JSON lines for the JSONL readers' differential tests (shared by test_fast_typed, test_fast_jsonl and
test_jsonl_columns: each compares a fast reader with the reference parser on the same mutated line).

* :data:`JSON_VALUES`: arbitrary JSON values, with the strings a 64-bit / enum / float field must refuse;
* :data:`BYTE_EDITS`: byte strings to insert or to replace with anywhere in a line;
* :func:`replace_one_value`: one value anywhere in a decoded line replaced (or one key added).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4) | st.sampled_from(["0", "01", "-0", "+1", "1e3", " 1", "18446744073709551616",
                                             "18446744073709551615", "9223372036854775808", "-9223372036854775809",
                                             "FINISH_REASON_STOP", "\ud800", "1.0"]),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=4), ch, max_size=3), max_leaves=5)

BYTE_EDITS = [b" ", b"\t", b"\n", b"\r", b'"', b"\\", b",", b":", b"0", b"-", b"+", b".", b"e", b"1", b"[", b"]",
              b"{", b"}", b"null", b"\\u0030", b"\xff", b"\xef\xbb\xbf", b"\x00", b"9" * 30]


def replace_one_value(data: st.DataObject, d: dict[str, Any], values: st.SearchStrategy = JSON_VALUES, *,
                      into_arrays: bool = True) -> None:
    """Replace, in place, one value of the JSON object ``d`` by one drawn from ``values``.

    Walks down a drawn path of keys through nested objects; with ``into_arrays``, a non-empty array on the way
    may have one element replaced instead (a block hash, an enum in a list...). Where the walk ends on an object,
    one of its keys (or a new key of up to 6 characters) gets the drawn value.
    """
    node: Any = d
    while isinstance(node, dict) and node and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(node)))
        if into_arrays and isinstance(node[key], list) and node[key] and data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(node[key]) - 1))
            node[key][i] = data.draw(values)
            return
        if not isinstance(node[key], dict):
            break
        node = node[key]
    if isinstance(node, dict):
        key = data.draw(st.sampled_from(sorted(node)) | st.text(max_size=6)) if node else data.draw(st.text(max_size=6))
        node[key] = data.draw(values)
