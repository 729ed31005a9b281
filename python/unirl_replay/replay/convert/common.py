"""Pieces both converters share: the conversion result, hash remapping, units, sequence ids.

Units: the contract speaks int64 ns (offsets from the capture window start); upstream speaks
float ms. :func:`ns_to_ms` / :func:`ms_to_ns` are the only conversions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.v1 import manifest_pb2, workload_pb2

SAMPLE_SEP = "#s"
WARMUP_PREFIX = "warmup:"
ORDINAL_SEP = "|"
ORDINAL_MIN_WIDTH = 6


def ns_to_ms(ns: int) -> float:
    """Contract ns -> upstream ms (float)."""
    return ns / 1e6


def ms_to_ns(ms: float) -> int:
    """Upstream ms -> contract ns, rounded to the nearest ns."""
    return int(round(ms * 1e6))


def ordinal_width(count: int) -> int:
    """Digits of the ordinal prefix of an engine's upstream ids (``count`` real requests): at least
    :data:`ORDINAL_MIN_WIDTH`, fixed per engine so that string order = ordinal order."""
    return max(ORDINAL_MIN_WIDTH, len(str(max(count - 1, 0))))


def play_names(plan) -> Callable[[str], str]:
    """The play id written upstream for each play of ``plan`` (an ``EnginePlan``).

    In lanes mode (``plan.lanes`` set) Dynamo Replay 1.6.1 grants free lanes to plays in play-id STRING order,
    not file order (measured: tests/test_replay_timelines.py, results/holdout-agentic-host2/README.md), so a
    trajectory id would decide which trajectory starts first. There the name is
    ``f"{position in plan.play_order:0{width}d}|{play}"`` (``Trajectory.start_order`` order), so string order =
    start order; elsewhere (plays only scope dependencies) the play id itself."""
    if plan.lanes is None:
        return str
    width = ordinal_width(len(plan.play_order))
    pos = {play: k for k, play in enumerate(plan.play_order)}
    return lambda play: f"{pos[play]:0{width}d}|{play}"


def sequence_id(request_id: str, sample: int, num_samples: int, ordinal: int, width: int) -> str:
    """Upstream request id of one sample: ``f"{ordinal:0{width}d}|{request_id}"``, followed by
    ``f"#s{sample}"`` when n > 1 (fan-out: n sequences sharing the prompt).

    ``ordinal`` is the request's position in the engine's file order (plays in order, requests in
    play order), zero-padded to the engine's fixed ``width``. Upstream serves requests that arrive
    at the same instant in request-id (string) order; the prefix makes that the trace's order.
    """
    head = f"{ordinal:0{width}d}{ORDINAL_SEP}{request_id}"
    return head if num_samples == 1 else f"{head}{SAMPLE_SEP}{sample}"


def parse_sequence_id(sid: str, width: int) -> tuple[int, str] | None:
    """(ordinal, rest) of an id with a ``width``-digit ordinal prefix (``rest`` is the request id,
    with its ``#s<i>`` suffix when it has one), or None. Whether a request with that id, ordinal
    and sample exists is the caller's check."""
    if len(sid) <= width or sid[width] != ORDINAL_SEP:
        return None
    head = sid[:width]
    if not (head.isascii() and head.isdigit()):
        return None
    return int(head), sid[width + 1:]


class HashRemap:
    """Salted uint64 block hashes -> dense ints 0, 1, 2, ... in first-seen order.

    One instance per engine replay (an engine's prefix cache is shared by all its plays, as in
    the real engine). Equal chained hashes mean equal prefixes, so equal ids do too.
    """

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}

    def ids(self, hashes) -> list[int]:
        """Dense ids of ``hashes`` (iterable of uint64), same length and order."""
        d = self._ids
        sd = d.setdefault
        return [sd(h, len(d)) for h in hashes]  # len(d) is evaluated before a new key is added

    def fresh(self, count: int) -> list[int]:
        """``count`` ids shared with nothing (prompts without hashes, prefix caching off)."""
        base = len(self._ids)
        for k in range(count):
            self._ids[-(base + k + 1)] = base + k  # negative keys never collide with uint64
        return list(range(base, base + count))

    def __len__(self) -> int:
        return len(self._ids)


@dataclass
class Conversion:
    """Upstream input for one single-engine replay, and how to map its rows back.

    Rows are produced lazily: :meth:`write` streams them to the upstream file as they are made
    (nothing per row is kept); :attr:`rows` materialises them (small traces, tests). What the
    conversion keeps is compact: the dense hash ids (one int per block, see
    :func:`dense_prompt_ids`) and the plan it was made from.

    Attributes:
        trace_format: ``"agentic_mooncake"`` (v2) or ``"mooncake"``.
        engine_id: the engine replayed.
        header: agentic_mooncake header object (None for mooncake).
        sequences: for agentic_mooncake, upstream request id -> (request_id, sample index) (a
            :class:`SequenceMap`, parsed from the id; the only table is request id -> ordinal,
            built on first use). For mooncake, aligned with the
            real rows (``rows[len(warmup_keys):]``) in order.
        warmup_keys: upstream ids (agentic) of the warm-up rows; their count for mooncake.
        lanes: ``agentic_lanes`` to pass (trajectory slots), or None.
        block_size: engine KV block size in tokens (= header block size / trace_block_size).
        origin_ns: capture-clock offset (ns) that became simulated 0 (this engine's first
            observed arrival).
        lead_ms: warm-up lead: real arrivals were shifted by it; subtract it from every result.
        notes: readable notes for the result.
        produce: callable returning a fresh iterator over the upstream rows in file order
            (warm-ups first), JSON-ready dicts (numbers in ms).
        signatures: mooncake only: callable iterating the real rows' (arrival, input length,
            output length) match signatures, aligned with ``sequences`` (no hash ids needed).
        lines: optional fast path of :meth:`write`: callable returning a fresh iterator over
            the file's text after the header, byte-identical to JSON-encoding ``produce``'s rows
            (one per line; chunks of whole lines, each ``str`` or UTF-8 bytes).
        unmodelled: the constraints this input lacks (``EnginePlan.unmodelled``, explicit
            ``--allow-unmodelled`` opt-in); written to the sidecar so the file never passes for an
            exact conversion.
    """

    trace_format: str
    engine_id: str
    header: dict | None
    sequences: Mapping[str, tuple[str, int]] | list[tuple[str, int]]
    warmup_keys: list[str]
    lanes: int | None
    block_size: int
    origin_ns: int
    lead_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    produce: Callable[[], Iterator[dict]] | None = field(default=None, repr=False)
    signatures: Callable[[], Iterator[tuple]] | None = field(default=None, repr=False)
    lines: Callable[[], Iterator[str]] | None = field(default=None, repr=False)
    _rows: list[dict] | None = field(default=None, repr=False)
    unmodelled: tuple = ()

    @property
    def rows(self) -> list[dict]:
        """Every upstream row in file order (materialised on first use; prefer :meth:`iter_rows`)."""
        if self._rows is None:
            self._rows = list(self.iter_rows())
        return self._rows

    def iter_rows(self) -> Iterator[dict]:
        """The upstream rows in file order, produced one at a time."""
        if self._rows is not None:
            return iter(self._rows)
        if self.produce is None:
            raise RuntimeError("conversion rows were released")
        return self.produce()

    def release(self) -> None:
        """Drop what only row production needs (mapping back keeps working)."""
        self.produce = None
        self.lines = None
        self._rows = None

    def write(self, path: str | Path) -> Path:
        """Write the upstream input file (JSON Lines; header first for agentic_mooncake),
        streaming rows as they are produced."""
        from unirl_replay.replay.convert import sidecar

        path = Path(path)
        sidecar.guard_target(path)  # creates the directory; never replaces a file we did not write
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        with open(path, "wb", buffering=1 << 20) as f:
            if self.header is not None:
                f.write((dumps(self.header) + "\n").encode("utf-8"))
            w = f.write
            if self.lines is not None and self._rows is None:
                for chunk in self.lines():
                    w(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            else:
                for r in self.iter_rows():
                    w((dumps(r) + "\n").encode("utf-8"))
        sidecar.write_sidecar(path, trace_format=self.trace_format, engine_id=self.engine_id,
                              block_size=self.block_size, unmodelled=self.unmodelled)
        return path


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier (odd: a bijection mod 2**64)
_CHUNK = 1 << 20  # elements per chunk of the vectorised passes (bounds their temporaries)


def _prompt_keys(prompts: Sequence, block_size: int,
                 hashes: Sequence | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(keys, offsets, fresh): every prompt's uint64 block hashes concatenated in order, prompt i
    at ``keys[offsets[i]:offsets[i + 1]]``; ``fresh`` marks the blocks of prompts without hashes
    (their keys are meaningless), None when every prompt carries hashes. ``hashes``, when given,
    is each prompt's ``prefix.block_hashes`` already read (None for a prompt without hashes)."""
    n = len(prompts)
    counts = np.empty(n, np.int64)
    conts = [None] * n
    any_fresh = False
    for i, p in enumerate(prompts):
        # empty when the prefix is unset (same as HasField + non-empty)
        hs = p.prefix.block_hashes if hashes is None else (hashes[i] or ())
        c = len(hs)
        if c:
            conts[i] = hs
            counts[i] = c
        else:
            counts[i] = -(-p.input_tokens // block_size)
            any_fresh = True
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    keys = np.empty(int(offsets[-1]), np.uint64)
    off = offsets.tolist()
    for i, hs in enumerate(conts):
        if hs is not None:
            keys[off[i]:off[i + 1]] = hs
    fresh = None
    if any_fresh:
        fresh = np.repeat(np.fromiter((c is None for c in conts), np.bool_, n), counts)
    return keys, offsets, fresh


def _repeated_values(keys: np.ndarray) -> np.ndarray:
    """The distinct values that occur more than once in ``keys``, sorted (one ``np.sort``)."""
    return _repeated_sorted(np.sort(keys))


def _repeated_sorted(s: np.ndarray) -> np.ndarray:
    """:func:`_repeated_values` of a sorted array ``s`` (the result holds no view of ``s``)."""
    reps = []
    for a in range(0, max(len(s) - 1, 0), _CHUNK):
        x = s[a:a + _CHUNK + 1]
        r = x[1:][x[1:] == x[:-1]]
        if len(r):
            reps.append(r[np.concatenate(([True], r[1:] != r[:-1]))])
    del s
    if not reps:
        return np.zeros(0, np.uint64)
    return np.unique(np.concatenate(reps)) if len(reps) > 1 else reps[0]


def _in_order(keys: np.ndarray, source: Sequence[np.ndarray] | None) -> Iterator[tuple[int, np.ndarray]]:
    """(start, block) over the values of ``keys`` in order, at most ``_CHUNK`` at a time, read from
    ``source`` (arrays whose concatenation equals ``keys``) when given, else from ``keys``."""
    if source is None:
        for a in range(0, len(keys), _CHUNK):
            yield a, keys[a:a + _CHUNK]
        return
    a = 0
    for part in source:
        for b in range(0, len(part), _CHUNK):
            k = part[b:b + _CHUNK]
            yield a, k
            a += len(k)


def _first_seen_ids(keys: np.ndarray, fresh: np.ndarray | None, dtype,
                    source: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Dense first-seen ids of ``keys`` (a block marked ``fresh`` equals nothing).

    One ``np.sort`` of a copy finds the values that occur more than once (usually few: shared
    prefixes). One pass in order, ``_CHUNK`` blocks at a time, then numbers the blocks: a bit
    table over those values' hashes flags the blocks that may hold one, ``searchsorted`` confirms
    them, and a repeated value takes the id of its first occurrence (every other block is a new
    id: ids are a running count of first occurrences). The ids are written over ``keys``' own
    buffer (no second array the size of the trace): the result is a view of it, so ``keys`` must
    not be used afterwards.

    ``source``: arrays whose concatenation equals ``keys`` (the arrow reader's read-only views of
    the trace file, ``WorkloadColumns.key_source``), only without ``fresh``. Then ``keys`` itself is
    sorted in place to find the repeated values (no sorted copy the size of the trace) and the
    numbering pass reads the keys in order from ``source``: the same ids.
    """
    total = len(keys)
    out = keys.view(dtype)[:total]
    if total == 0:
        return out
    if source is not None and fresh is None:
        keys.sort()  # np.sort's algorithm, in place: the same sorted values
        dup = _repeated_sorted(keys)
    else:
        source = None
        dup = _repeated_values(keys if fresh is None else keys[~fresh])
    ndup = len(dup)
    if ndup == 0:
        for a in range(0, total, _CHUNK):
            out[a:a + _CHUNK] = np.arange(a, min(a + _CHUNK, total), dtype=dtype)
        return out
    bits = max(10, min(26, (16 * ndup).bit_length()))
    shift = np.uint64(64 - bits)
    table = np.zeros(1 << bits, np.bool_)
    table[(dup * _GOLDEN) >> shift] = True
    group_id = np.full(ndup, -1, np.int64)  # id of each repeated value, once its first occurrence is seen
    count = 0  # ids given so far
    for a, k in _in_order(keys, source):
        n = len(k)
        maybe = table[(k * _GOLDEN) >> shift]
        if fresh is not None:
            maybe &= ~fresh[a:a + n]
        pos = np.flatnonzero(maybe)
        val = k[pos]
        grp = np.searchsorted(dup, val)
        np.minimum(grp, ndup - 1, out=grp)
        hit = dup[grp] == val
        pos, grp = pos[hit], grp[hit]
        isfirst = np.ones(n, np.bool_)
        isfirst[pos] = False
        new = group_id[grp] < 0
        if new.any():
            new_grp, at = np.unique(grp[new], return_index=True)  # first occurrence in this chunk
            first_pos = pos[new][at]
            isfirst[first_pos] = True
        # the running count of first occurrences, straight into the output (its dtype: the count fits; the
        # shift by count - 1 wraps modulo 2**32 at count 0, to the right non-negative ids). Only overwrites
        # keys[:a + n] (already read; or sorted scratch, with a source)
        ids = np.cumsum(isfirst, dtype=out.dtype, out=out[a:a + n])
        ids += out.dtype.type((count - 1) % (1 << (8 * out.dtype.itemsize)) if out.dtype.kind == "u" else count - 1)
        count = int(ids[-1]) + 1
        if new.any():
            group_id[new_grp] = ids[first_pos]
        ids[pos] = group_id[grp]
    return out


def dense_prompt_ids(prompts: Sequence, block_size: int,
                     hashes: Sequence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Dense block ids of every prompt (Request or CacheWarmup), exactly as one
    :class:`HashRemap` called prompt by prompt in this order would give them (first-seen order;
    fresh ids for a prompt without hashes), computed with numpy instead of a dict (see
    :func:`_first_seen_ids`).

    ``hashes``: optional, each prompt's ``prefix.block_hashes`` already read (None: no hashes).

    Returns:
        (ids, offsets): prompt i's ids are ``ids[offsets[i]:offsets[i + 1]]`` (uint32 when they
        fit, else int64; 4 bytes per block, a view of an 8-byte-per-block buffer).
    """
    keys, offsets, fresh = _prompt_keys(prompts, block_size, hashes)
    dtype = np.uint32 if len(keys) < 2**32 else np.int64
    return _first_seen_ids(keys, fresh, dtype), offsets


class FactSamples(Mapping):
    """request id -> num_samples read from ``EnginePlan.facts`` (``facts[id][0]``)."""

    __slots__ = ("_facts",)

    def __init__(self, facts: Mapping[str, tuple]) -> None:
        self._facts = facts

    def __getitem__(self, key: str) -> int:
        return self._facts[key][0]

    def get(self, key: str, default=None):
        f = self._facts.get(key)
        return default if f is None else f[0]

    def __contains__(self, key) -> bool:
        return key in self._facts

    def __iter__(self) -> Iterator[str]:
        return iter(self._facts)

    def __len__(self) -> int:
        return len(self._facts)


_GATHER_ROWS = 1 << 14  # requests per chunk of the columns gather (bounds its index temporaries)


def dense_prompt_ids_columns(warmups: Sequence, cols, request_ids: Sequence[str], input_tokens: Sequence[int],
                             block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dense_prompt_ids` of ``[*warmups, *requests]`` with the requests' hashes taken from
    :class:`~unirl_replay.contract.workload_columns.WorkloadColumns` ``cols`` instead of messages.

    ``input_tokens[i]`` is request i's prompt length (its fresh block count when it carries no
    hashes). When the requests are all of ``cols``' requests in column order, all carry hashes and
    there are no warm-ups, ``cols.keys`` itself becomes the id buffer (no copy): ``cols.keys`` is
    then set to None (used up).
    """
    off = cols.offsets
    row = cols.row
    nr = len(request_ids)
    rows = np.fromiter(map(row.__getitem__, request_ids), np.int64, nr)
    starts = off[rows]
    cnt = off[rows + 1] - starts
    fresh_req = cnt == 0
    any_fresh_req = bool(fresh_req.any())
    if cols.keys is None:
        raise RuntimeError("the columns' hash keys were used up by an earlier conversion")
    if not warmups and not any_fresh_req and nr == len(cols) and \
            (nr == 0 or (rows[0] == 0 and bool((np.diff(rows) == 1).all()))):
        keys, source = cols.keys, cols.key_source
        cols.keys = cols.key_source = None
        dtype = np.uint32 if len(keys) < 2**32 else np.int64
        if source is not None and sum(map(len, source)) != len(keys):
            source = None  # not the views of these keys: sort a copy
        return _first_seen_ids(keys, None, dtype, source), off.copy()
    wkeys = [np.array(w.prefix.block_hashes, np.uint64) if w.prefix.block_hashes else None for w in warmups]
    counts = np.empty(len(warmups) + nr, np.int64)
    for k, (w, wk) in enumerate(zip(warmups, wkeys)):
        counts[k] = len(wk) if wk is not None else -(-w.input_tokens // block_size)
    counts[len(warmups):] = cnt
    if any_fresh_req:
        inp = np.fromiter(input_tokens, np.int64, nr)
        counts[len(warmups):][fresh_req] = -(-inp[fresh_req] // block_size)
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    keys = np.empty(int(offsets[-1]), np.uint64)
    fresh = None
    if any_fresh_req or any(wk is None for wk in wkeys):
        fresh = np.zeros(len(keys), np.bool_)
    for k, wk in enumerate(wkeys):
        if wk is None:
            fresh[offsets[k]:offsets[k + 1]] = True
        else:
            keys[offsets[k]:offsets[k + 1]] = wk
    src_keys = cols.keys
    nw = len(warmups)
    for a in range(0, nr, _GATHER_ROWS):
        b = min(a + _GATHER_ROWS, nr)
        c = cnt[a:b]
        dst0 = offsets[nw + a:nw + b]
        if any_fresh_req:
            fr = fresh_req[a:b]
            for d0, d1 in zip(dst0[fr].tolist(), offsets[nw + a + 1:nw + b + 1][fr].tolist()):
                fresh[d0:d1] = True
            keep = ~fr
            c, dst0, src0 = c[keep], dst0[keep], starts[a:b][keep]
        else:
            src0 = starts[a:b]
        total = int(c.sum())
        if not total:
            continue
        before = np.zeros(len(c), np.int64)
        np.cumsum(c[:-1], out=before[1:])
        step = np.arange(total, dtype=np.int64)
        keys[np.repeat(dst0 - before, c) + step] = src_keys[np.repeat(src0 - before, c) + step]
    dtype = np.uint32 if len(keys) < 2**32 else np.int64
    return _first_seen_ids(keys, fresh, dtype), offsets


def _decimal_csv(v: np.ndarray) -> tuple[str, np.ndarray]:
    """(text, ends): the non-negative ints ``v`` written as ``"a,b,c,"`` (decimal, each followed
    by a comma), and ``ends[i]`` = the end of ``v[:i]``'s text (``ends[0] = 0``)."""
    n = len(v)
    ends = np.zeros(n + 1, np.int64)
    if n == 0:
        return "", ends
    v = v.astype(np.uint64 if v.dtype.itemsize > 4 else np.uint32, copy=False)
    width = len(str(int(v.max())))
    nd = np.ones(n, np.int8)
    for d in range(1, width):
        nd += v >= 10**d
    mat = np.empty((n, width + 1), np.uint8)  # right-aligned digits, then ","
    mat[:, width] = 44
    w, q = v.copy(), np.empty_like(v)
    for d in range(width):
        np.floor_divide(w, 10, out=q)
        np.subtract(w, q * 10, out=w)  # the d-th digit from the right
        col = mat[:, width - 1 - d]
        col[...] = w
        col += 48
        w, q = q, w
    del w, q
    keep = np.arange(width + 1, dtype=np.int8) >= (width - nd)[:, None]
    text = mat[keep].tobytes().decode("ascii")
    np.cumsum(nd, dtype=np.int64, out=ends[1:])
    ends[1:] += np.arange(1, n + 1)
    return text, ends


def joined_ids(ids: np.ndarray, offsets: np.ndarray, lo: int, hi: int) -> list[str]:
    """Prompts ``lo..hi-1``'s ids as JSON array bodies (``"3,4,5"``, what ``json`` writes between
    the brackets of ``[3, 4, 5]`` with ``separators=(",", ":")``), formatted vectorised."""
    base = int(offsets[lo])
    text, ends = _decimal_csv(ids[base:int(offsets[hi])])
    cut = ends[offsets[lo:hi + 1] - base].tolist()
    return [text[cut[k]:cut[k + 1] - 1] if cut[k + 1] > cut[k] else "" for k in range(hi - lo)]


def json_float(x: float) -> str:
    """A float exactly as ``json`` encodes it (``repr``; NaN / Infinity spelled as json does)."""
    return float.__repr__(x) if math.isfinite(x) else _DUMPS(x)


_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


class SequenceMap(Mapping):
    """Upstream request id -> (request_id, sample) of one engine's real rows, computed from the id
    (``NNNNNN|request_id`` or ``NNNNNN|request_id#s<i>``, see :func:`sequence_id`) instead of
    stored per row; the ordinal must be the request's own.

    Generated ids are unique (the ordinal prefix differs between requests), so the parse is
    unambiguous; warm-up ids and ids of requests outside this engine's plan are not keys.
    """

    def __init__(self, samples: Mapping[str, int], plays: Mapping[str, list[str]], play_order: Sequence[str],
                 warmup_keys: Sequence[str], play_of: Callable, include_real: bool = True) -> None:
        # samples: request id -> num_samples of (at least) the plan's requests
        self._samples, self._plays, self._order = samples, plays, play_order
        self._warm, self._play_of, self._real = frozenset(warmup_keys), play_of, include_real
        self._ordinals: dict[str, int] | None = None
        self.width = ordinal_width(sum(len(plays[p]) for p in play_order) if include_real else 0)

    def ordinals(self) -> dict[str, int]:
        """request_id -> ordinal (position in file order), built on first use."""
        if self._ordinals is None:
            self._ordinals = {} if not self._real else \
                {rid: k for k, rid in enumerate(rid for play in self._order for rid in self._plays[play])}
        return self._ordinals

    def __getitem__(self, sid: str) -> tuple[str, int]:
        if self._real and sid not in self._warm:
            p = parse_sequence_id(sid, self.width)
            if p is not None:
                k, rest = p
                ords = self.ordinals()
                n = self._samples.get(rest)
                if n is not None and n == 1 and ords.get(rest) == k:
                    return rest, 0
                rid, sep, s = rest.rpartition(SAMPLE_SEP)
                if sep and s.isdigit() and str(int(s)) == s:
                    n = self._samples.get(rid)
                    if n is not None and n > 1 and int(s) < n and ords.get(rid) == k:
                        return rid, int(s)
        raise KeyError(sid)

    def __iter__(self) -> Iterator[str]:
        if not self._real:
            return
        k, w = 0, self.width
        for play in self._order:
            for rid in self._plays[play]:
                n = self._samples[rid]
                for s in range(n):
                    yield sequence_id(rid, s, n, k, w)
                k += 1

    def __len__(self) -> int:
        if not self._real:
            return 0
        return sum(self._samples[rid] for play in self._order for rid in self._plays[play])


def prompt_ids(req_or_warmup, remap: HashRemap, block_size: int) -> list[int]:
    """Dense hash ids for a Request or CacheWarmup prompt (fresh ids when it carries none)."""
    if req_or_warmup.HasField("prefix") and req_or_warmup.prefix.block_hashes:
        return remap.ids(req_or_warmup.prefix.block_hashes)
    return remap.fresh(-(-req_or_warmup.input_tokens // block_size))


def origin_of(requests: list[workload_pb2.Request]) -> int:
    """Earliest observed arrival (ns) among ``requests``; 0 when none is observed."""
    obs = [r.arrival.observed_offset_ns for r in requests if r.arrival.WhichOneof("kind") == "observed_offset_ns"]
    return min(obs) if obs else 0


def check_unique(ids: dict | set, new_id: str, record_id: str) -> None:
    """Raise TraceFormatError when a generated upstream id collides with an existing one."""
    if new_id in ids:
        raise TraceFormatError(f"generated upstream id {new_id!r} collides with another id",
                               record_id=record_id, rule="convert.id_collision")


def engine_args(engine: manifest_pb2.EngineConfig, timing_model: dict) -> tuple[dict, list[str]]:
    """Upstream ``extra_engine_args`` for one engine: ``{"engine": {...}}``.

    Values come from the trace's ``EngineConfig``; fields left at 0 (unknown) are omitted so the
    upstream default applies, and a note says which.
    """
    e: dict = {"block_size": engine.block_size_tokens,
               "enable_prefix_caching": engine.enable_prefix_caching,
               "enable_chunked_prefill": engine.enable_chunked_prefill,
               "timing_model": timing_model}
    defaulted = []
    for key, val in (("num_gpu_blocks", engine.num_kv_blocks), ("max_num_seqs", engine.max_num_seqs),
                     ("max_num_batched_tokens", engine.max_num_batched_tokens),
                     ("max_model_len", engine.max_model_len)):
        if val:
            e[key] = val
        else:
            defaulted.append(key)
    notes = [f"engine {engine.engine_id!r}: {', '.join(defaulted)} unknown in the trace; upstream "
             "defaults used"] if defaulted else []
    return {"engine": e}, notes


def fill_not_before(rid: str, bounds: dict, facts: dict, lanes: bool, lead_ms: float, origin: int) -> None:
    """Set ``bounds[rid]`` (and every predecessor's it needs): the request's ``not_before_ms``, the latest of its
    predecessors' bounds plus the measured delay after each (a root: 0 with lanes, else ``lead_ms`` + its arrival
    in ms after ``origin``). ``facts[rid][3]`` is the arrival ns, ``facts[rid][4]`` the dependencies as
    (predecessor, n, trigger, relation, delay ns or None). Iterative: a long chain never hits the recursion limit.
    Shared by both agentic_mooncake row writers (the Python one and arrow_rows), so their bytes agree.

    Raises TraceFormatError (``dependency.cycle``: a request that depends on itself, directly or through others;
    ``dependency.unresolved``: on a request ``facts`` does not hold): the gate refuses both first, but this is
    reachable by calling the converter on an ungated trace, where it looped (and grew its stack) forever."""
    stack = [rid]
    entered: set = set()  # requests whose predecessors were pushed: met again unbounded = on a cycle
    while stack:
        cur = stack[-1]
        if cur in bounds:
            stack.pop()
            continue
        fact = facts.get(cur)
        if fact is None:
            raise TraceFormatError(f"a dependency names request {cur!r}, which the workload does not hold",
                                   record_id=str(stack[-2] if len(stack) > 1 else cur), rule="dependency.unresolved")
        t, deps = fact[3], fact[4]
        if not deps:
            bounds[cur] = 0.0 if lanes else lead_ms + ns_to_ms(t - origin)
            stack.pop()
            continue
        todo = [d[0] for d in deps if d[0] not in bounds]
        if todo:
            if cur in entered:
                raise TraceFormatError("the request depends on itself through its dependencies (a cycle): no "
                                       "not_before bound exists", record_id=str(cur), rule="dependency.cycle")
            entered.add(cur)
            stack.extend(todo)
            continue
        bounds[cur] = max(bounds[prid] + (ns_to_ms(delay) if delay is not None else 0.0)
                          for prid, _pn, _trig, _rel, delay in deps)
        stack.pop()
