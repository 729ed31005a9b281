"""Upstream rows -> per-request predictions, in bulk (the runner's work after the upstream call).

Two functions with reference twins that define them:

* :func:`map_rows` = ``{seqs[row["request_id"]]: row for row in rows if row["request_id"] in seqs}``
  for a :class:`~unirl_replay.replay.convert.common.SequenceMap` ``seqs``, with the map's
  membership computed once (one dict of the plan's request ids -> (ordinal, sample count))
  instead of per row through the protobuf messages. (Measured and dropped: a dict of every
  generated upstream id, one lookup per row: building it costs what the parse saves.)
* :func:`predicted_values_bulk` = :func:`predicted_values` with the single-sample requests'
  times converted in numpy (any doubt: the per-request function).
* :func:`predicted_request` = the runner's ``_predicted`` (min over samples of arrival /
  scheduled / first token, max of completion when all samples completed, min of cached tokens),
  building the message in one constructor call and with a path for one sample.

``tests/test_replay_mapback.py`` checks both against their twins on random rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter

import numpy as np

from unirl_replay.replay.convert.common import ORDINAL_SEP, SAMPLE_SEP, FactSamples, SequenceMap, parse_sequence_id
from unirl_replay.v1 import replay_pb2

_Predicted = replay_pb2.PredictedRequest


def map_rows(seqs: Mapping[str, tuple[str, int]], rows: Iterable[dict]) -> dict[tuple[str, int], dict]:
    """``(request_id, sample) -> row`` of the rows whose upstream id is one of ``seqs``' keys
    (a later row with the same key replaces an earlier one)."""
    if not isinstance(seqs, SequenceMap):
        return {seqs[r["request_id"]]: r for r in rows if r["request_id"] in seqs}
    out: dict[tuple[str, int], dict] = {}
    if not seqs._real:
        return out
    samples, warm, width = seqs._samples, seqs._warm, seqs.width
    # request_id -> (ordinal, sample count), in file order (what the ids were generated from)
    info = {rid: (k, samples[rid]) for rid, k in seqs.ordinals().items()}
    for row in rows:
        sid = row["request_id"]
        if sid in warm:
            continue
        p = parse_sequence_id(sid, width)
        if p is None:
            continue
        o, rest = p
        if info.get(rest) == (o, 1):
            out[(rest, 0)] = row
            continue
        rid, sep, k = rest.rpartition(SAMPLE_SEP)
        if sep and k.isdigit() and str(int(k)) == k:
            got = info.get(rid)
            if got is not None and got[0] == o and got[1] > 1 and int(k) < got[1]:
                out[(rid, int(k))] = row
    return out


def _ns(ms: float, shift_ms: float, offset_ns: int) -> int:
    return int(round((ms - shift_ms) * 1e6)) + offset_ns  # = common.ms_to_ns(ms - shift_ms) + offset


def predicted_request(request_id: str, num_samples: int, rows: Mapping, engine_id: str, shift_ms: float,
                      offset_ns: int) -> replay_pb2.PredictedRequest:
    """The PredictedRequest of one request from its samples' upstream rows (see module doc)."""
    if num_samples == 1:
        s = rows.get((request_id, 0))
        if s is None:
            return _Predicted(request_id=request_id, engine_id=engine_id)
        kw = {"arrival_ns": _ns(s["arrival_time_ms"], shift_ms, offset_ns)}
        a = s.get("first_admit_ms")
        if a is not None:
            kw["scheduled_ns"] = _ns(a, shift_ms, offset_ns)
        f = s.get("first_token_ms")
        if f is not None:
            kw["first_token_ns"] = _ns(f, shift_ms, offset_ns)
        if s.get("terminal_status") == "completed":
            e = s.get("terminal_time_ms")
            if e is not None:
                kw["completion_ns"] = _ns(e, shift_ms, offset_ns)
        return _Predicted(request_id=request_id, engine_id=engine_id,
                          cached_tokens=int(s.get("reused_input_tokens") or 0), **kw)
    samples = [rows.get((request_id, k)) for k in range(num_samples)]
    if any(s is None for s in samples):
        return _Predicted(request_id=request_id, engine_id=engine_id)
    kw = {"arrival_ns": min(_ns(s["arrival_time_ms"], shift_ms, offset_ns) for s in samples)}
    admits = [s.get("first_admit_ms") for s in samples if s.get("first_admit_ms") is not None]
    if admits:
        kw["scheduled_ns"] = min(_ns(a, shift_ms, offset_ns) for a in admits)
    firsts = [s.get("first_token_ms") for s in samples if s.get("first_token_ms") is not None]
    if firsts:
        kw["first_token_ns"] = min(_ns(f, shift_ms, offset_ns) for f in firsts)
    if all(s.get("terminal_status") == "completed" and s.get("terminal_time_ms") is not None for s in samples):
        kw["completion_ns"] = max(_ns(s["terminal_time_ms"], shift_ms, offset_ns) for s in samples)
    return _Predicted(request_id=request_id, engine_id=engine_id,
                      cached_tokens=min(int(s.get("reused_input_tokens") or 0) for s in samples), **kw)


def predicted_values(rows: Mapping, request_ids: Iterable[str], samples: Mapping[str, int], shift_ms: float,
                     offset_ns: int) -> dict[str, tuple | None]:
    """The predictions of one engine's requests as values, without a message per request:
    request id -> ``(arrival_ns, scheduled_ns, first_token_ns, completion_ns, cached_tokens)``
    (None for an absent field), or None when a sample has no row (its PredictedRequest then
    carries its ids only). ``rows``: ``(request_id, sample) -> row`` (:func:`map_rows`).

    Request by request what :func:`predicted_request` builds (its twin, tested); the runner adds
    the messages to the result in one pass (:func:`add_predicted`)."""
    out: dict[str, tuple | None] = {}
    get = rows.get
    for rid in request_ids:
        n = samples[rid]
        if n == 1:
            s = get((rid, 0))
            out[rid] = None if s is None else _values_one(s, shift_ms, offset_ns)
            continue
        ss = [get((rid, k)) for k in range(n)]
        out[rid] = None if any(s is None for s in ss) else _values_many(ss, shift_ms, offset_ns)
    return out


_BULK_MIN = 64  # below this many single-sample requests the per-request path is as fast
_NS_LIMIT = 2.0**62  # |ns| bound of the bulk path (int64 arithmetic without overflow); beyond: per request


def predicted_values_bulk(rows: Mapping, request_ids: Iterable[str], samples: Mapping[str, int], shift_ms: float,
                          offset_ns: int) -> dict[str, tuple | None]:
    """:func:`predicted_values` (same dict, same values, same types), with the single-sample
    requests' times converted in bulk: each field read once per row into a column, then
    ``(ms - shift_ms) * 1e6`` rounded half to even in numpy (``np.rint``: what ``round`` does
    to a double) plus ``offset_ns`` in int64. Multi-sample requests and requests without a row
    take the per-request functions. Whenever a column is not plain finite numbers (a string, a
    bool column, NaN, an int beyond int64, a value too large for the int64 sum) or a field is
    missing, the whole call is :func:`predicted_values`' (its result or its exception)."""
    ids = request_ids if isinstance(request_ids, list) else list(request_ids)
    get = rows.get
    single = [get((rid, 0)) if samples[rid] == 1 else None for rid in ids]
    present = [s for s in single if s is not None]
    if len(present) < _BULK_MIN or not -_NS_LIMIT < offset_ns < _NS_LIMIT:
        return predicted_values(rows, ids, samples, shift_ms, offset_ns)
    try:
        cols = _bulk_columns(present, shift_ms, offset_ns)
    except (KeyError, TypeError, ValueError, AttributeError):
        cols = None
    if cols is None:
        return predicted_values(rows, ids, samples, shift_ms, offset_ns)
    it = iter(zip(*cols))
    out: dict[str, tuple | None] = {}
    for rid, s in zip(ids, single):
        if s is not None:
            out[rid] = next(it)
            continue
        n = samples[rid]
        if n == 1:
            out[rid] = None  # no row
            continue
        ss = [get((rid, k)) for k in range(n)]
        out[rid] = None if any(x is None for x in ss) else _values_many(ss, shift_ms, offset_ns)
    return out


def predicted_values_mapped(seqs: Mapping[str, tuple[str, int]], rows: list, request_ids: Iterable[str],
                            samples: Mapping[str, int], shift_ms: float, offset_ns: int) -> dict[str, tuple | None]:
    """``predicted_values_bulk(map_rows(seqs, rows), request_ids, samples, shift_ms, offset_ns)``
    (the same dict, same values, same types; its twin, tested), with the rows matched by
    position when they are exactly the converter's real sequences in file order: the upstream
    ids read once and compared with the ids the converter generated (``sequence_id``, every
    request of one sample), then the times converted in bulk straight from the rows
    (:func:`_bulk_columns`), without a ``(request_id, sample)`` dict. Anything else (other
    orders, missing or extra rows, warm-ups, fan-out, odd values, a mooncake map): the
    composition itself."""
    ids = request_ids if isinstance(request_ids, list) else list(request_ids)
    got = _mapped_columns(seqs, rows, samples, shift_ms, offset_ns)
    if got is not None:
        fast, cols = got
        out: dict[str, tuple | None] = dict(zip(fast, zip(*cols)))
        if ids == fast:  # workload order = file order (one list comparison)
            return out
        for rid in ids:  # requests without a row (not in this engine's file): no prediction
            if rid not in out:
                out[rid] = None
        if len(out) == len(ids):
            return out
    return predicted_values_bulk(map_rows(seqs, rows), ids, samples, shift_ms, offset_ns)


def predicted_columns(seqs: Mapping[str, tuple[str, int]], rows: list, request_ids: list[str],
                      samples: Mapping[str, int], shift_ms: float, offset_ns: int) -> tuple | None:
    """The values of :func:`predicted_values_mapped` as five columns aligned with
    ``request_ids`` -- ``(arrival_ns, scheduled_ns, first_token_ns, completion_ns,
    cached_tokens)``, lists, so that ``predicted_values_mapped(...)[request_ids[i]] ==
    tuple(c[i] for c in cols)`` for every ``i`` -- when the rows are exactly the converter's
    real sequences in file order and ``request_ids`` is that order (the positional case, every
    request predicted); None otherwise (the caller then takes :func:`predicted_values_mapped`).
    Arrival is never None here; the other columns may hold None (an absent field)."""
    got = _mapped_columns(seqs, rows, samples, shift_ms, offset_ns)
    if got is None or not isinstance(request_ids, list) or got[0] != request_ids:
        return None
    return got[1]


def _mapped_columns(seqs, rows, samples: Mapping[str, int], shift_ms: float, offset_ns: int) -> tuple | None:
    """(request ids in file order, the five value columns) of the positional case, or None."""
    read = None  # (ids, the value fields), the rows read in one pass, when every row has every key
    if isinstance(rows, list) and len(rows) >= _BULK_MIN:
        try:
            read = tuple(zip(*map(_ID_AND_FIELDS, rows)))
        except (KeyError, TypeError):
            read = None  # each part reads the rows itself (and decides)
    fast = _positional(seqs, rows, samples, read[0] if read else None)
    if fast is None or len(rows) < _BULK_MIN or not -_NS_LIMIT < offset_ns < _NS_LIMIT:
        return None
    try:
        cols = _bulk_columns(rows, shift_ms, offset_ns, read[1:] if read else None)
    except (KeyError, TypeError, ValueError, AttributeError):
        cols = None
    return None if cols is None else (fast, cols)


def _heads(n: int, width: int) -> str:
    """``"".join(f"{k:0{width}d}{ORDINAL_SEP}" for k in range(n))``, the digits made in numpy."""
    if n == 0:
        return ""
    if width < len(str(n - 1)):  # an ordinal wider than the width: the f-strings themselves
        return "".join(f"{k:0{width}d}{ORDINAL_SEP}" for k in range(n))
    mat = np.empty((n, width + 1), np.uint8)
    mat[:, width] = ord(ORDINAL_SEP)
    k = np.arange(n, dtype=np.int64)
    for d in range(width - 1, -1, -1):
        mat[:, d] = 48 + k % 10
        k //= 10
    return mat.tobytes().decode("ascii")


def _positional(seqs, rows, samples: Mapping[str, int], ids: tuple | None = None) -> list[str] | None:
    """The request ids in file order when ``rows`` are exactly ``seqs``' real sequences in that
    order, every request of one sample (in ``seqs`` and in ``samples``); else None. ``ids``: the
    rows' ``request_id`` values, read already (else read here)."""
    if not isinstance(seqs, SequenceMap) or not seqs._real or not isinstance(rows, list):
        return None
    order = [rid for play in seqs._order for rid in seqs._plays[play]]
    if len(order) != len(rows):
        return None
    try:
        got = ids if ids is not None and len(ids) == len(rows) else list(map(_ROW_ID, rows))
        if set(map(samples.__getitem__, order)) != {1}:
            return None
        own = seqs._samples
        if type(own) is FactSamples:  # its __getitem__ = facts[key][0], read in C
            if set(map(_FIRST, map(own._facts.__getitem__, order))) != {1}:
                return None
        elif set(map(own.__getitem__, order)) != {1}:
            return None
        if set(map(type, got)) != {str}:
            return None
    except (KeyError, TypeError):
        return None
    w = seqs.width
    # got[k] == f"{k:0{w}d}{ORDINAL_SEP}{order[k]}" (= sequence_id(rid, 0, 1, k, w)) for every k:
    # the heads (w + 1 characters each: a shorter id makes the joined heads shorter) and the rests
    same = _heads_and_rests(got, order, w)
    if same is None:  # not ASCII: compared string by string
        same = [s[w + 1:] for s in got] == order and "".join([s[:w + 1] for s in got]) == _heads(len(got), w)
    if not same:
        return None
    if seqs._warm and not seqs._warm.isdisjoint(got):
        return None  # map_rows skips warm-up ids
    return order


def _heads_and_rests(got, order: list[str], w: int) -> bool | None:
    """``got[k] == head_k + order[k]`` for every ``k`` (``head_k`` the k-th ``w + 1`` characters of
    :func:`_heads`), compared as bytes in numpy when the ids are ASCII (a character is a byte): every
    length is ``w + 1`` more than its request id's, the heads sit at those offsets of the joined ids, and
    the rest of the joined ids is the joined request ids. None: some id is not ASCII (not decided)."""
    joined = "".join(got)
    if not joined.isascii():
        return None
    n = len(got)
    lens = np.fromiter(map(len, got), np.int64, n)
    if not np.array_equal(lens, np.fromiter(map(len, order), np.int64, n) + (w + 1)):
        return False
    b = np.frombuffer(joined.encode("ascii"), np.uint8)
    starts = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    at = (starts[:, None] + np.arange(w + 1)).ravel()  # every head's characters
    if not np.array_equal(b[at], np.frombuffer(_heads(n, w).encode("ascii"), np.uint8)):
        return False
    rest = np.ones(len(b), np.bool_)
    rest[at] = False
    return b[rest].tobytes() == "".join(order).encode("utf-8")


_ROW_ID = itemgetter("request_id")
_FIRST = itemgetter(0)


def _bulk_ns(col: list, shift_ms: float, offset_ns: int) -> list | None:
    """``[None if v is None else _ns(v, shift_ms, offset_ns) for v in col]`` in numpy; None when
    the column is not plain finite numbers (the caller then takes the per-request path)."""
    absent = [v is None for v in col] if None in col else None
    if absent is not None:
        a = np.array([0.0 if v is None else v for v in col])
    else:
        a = np.array(col)
    if a.dtype.kind not in "fi" or a.ndim != 1:
        return None
    x = np.rint((a.astype(np.float64) - shift_ms) * 1e6)
    if not bool(np.isfinite(x).all()) or float(np.abs(x).max(initial=0.0)) >= _NS_LIMIT:
        return None
    ns = (x.astype(np.int64) + np.int64(offset_ns)).tolist()
    if absent is not None:
        ns = [None if miss else v for v, miss in zip(ns, absent)]
    return ns


_FIELD_NAMES = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "terminal_time_ms", "terminal_status",
                "reused_input_tokens")
_ROW_FIELDS = itemgetter(*_FIELD_NAMES)
_ID_AND_FIELDS = itemgetter("request_id", *_FIELD_NAMES)


def _bulk_columns(present: list[dict], shift_ms: float, offset_ns: int, read: tuple | None = None) -> tuple | None:
    """``read``: the six fields of every row as columns, read already (else read here)."""
    try:  # upstream rows carry every key (None when unset): one C-level read per row
        cols = read if read is not None and len(read) == 6 else tuple(zip(*map(_ROW_FIELDS, present)))
    except KeyError:
        cols = None
    if cols is not None:
        arr, adm, ftk, term, status, reused = cols
        if status.count("completed") == len(status):  # every row completed: the terminal times
            ends = term
        else:
            ends = [t if st == "completed" else None for t, st in zip(term, status)]
    else:  # a key is missing somewhere: the per-field reads (``get``: a missing key reads None)
        arr = [s["arrival_time_ms"] for s in present]
        adm = [s.get("first_admit_ms") for s in present]
        ftk = [s.get("first_token_ms") for s in present]
        ends = [s.get("terminal_time_ms") if s.get("terminal_status") == "completed" else None for s in present]
        reused = [s.get("reused_input_tokens") for s in present]
    if any(a is None for a in arr):
        return None  # the per-request path raises on it (arrival is read, never skipped)
    arrival = _bulk_ns(arr, shift_ms, offset_ns)
    admit = _bulk_ns(adm, shift_ms, offset_ns)
    first = _bulk_ns(ftk, shift_ms, offset_ns)
    end = _bulk_ns(ends, shift_ms, offset_ns)
    if arrival is None or admit is None or first is None or end is None:
        return None
    if set(map(type, reused)) == {int}:  # plain ints: int(x or 0) is x
        cached = list(reused)
    else:
        cached = [int(x or 0) for x in reused]
    return arrival, admit, first, end, cached


def _values_one(s: dict, shift_ms: float, offset_ns: int) -> tuple:
    a = s.get("first_admit_ms")
    f = s.get("first_token_ms")
    e = s.get("terminal_time_ms") if s.get("terminal_status") == "completed" else None
    return (_ns(s["arrival_time_ms"], shift_ms, offset_ns),
            None if a is None else _ns(a, shift_ms, offset_ns),
            None if f is None else _ns(f, shift_ms, offset_ns),
            None if e is None else _ns(e, shift_ms, offset_ns),
            int(s.get("reused_input_tokens") or 0))


def _values_many(samples: list[dict], shift_ms: float, offset_ns: int) -> tuple:
    admits = [s.get("first_admit_ms") for s in samples if s.get("first_admit_ms") is not None]
    firsts = [s.get("first_token_ms") for s in samples if s.get("first_token_ms") is not None]
    done = all(s.get("terminal_status") == "completed" and s.get("terminal_time_ms") is not None for s in samples)
    return (min(_ns(s["arrival_time_ms"], shift_ms, offset_ns) for s in samples),
            min(_ns(a, shift_ms, offset_ns) for a in admits) if admits else None,
            min(_ns(f, shift_ms, offset_ns) for f in firsts) if firsts else None,
            max(_ns(s["terminal_time_ms"], shift_ms, offset_ns) for s in samples) if done else None,
            min(int(s.get("reused_input_tokens") or 0) for s in samples))


_FIELDS = ("arrival_ns", "scheduled_ns", "first_token_ns", "completion_ns")


def add_predicted(requests, request_id: str, engine_id: str, values: tuple | None) -> None:
    """Append the PredictedRequest of ``values`` (:func:`predicted_values`; None: no prediction)
    to a repeated ``PredictedRequest`` field (= appending :func:`predicted_request`'s message)."""
    if values is None:
        requests.add(request_id=request_id, engine_id=engine_id)
        return
    a, sch, f, e, cached = values
    if sch is not None and f is not None and e is not None:
        requests.add(request_id=request_id, engine_id=engine_id, arrival_ns=a, scheduled_ns=sch,
                     first_token_ns=f, completion_ns=e, cached_tokens=cached)
        return
    kw = {k: v for k, v in zip(_FIELDS, values) if v is not None}
    requests.add(request_id=request_id, engine_id=engine_id, cached_tokens=cached, **kw)
