"""Pieces both converters share: the conversion result, hash remapping, units, sequence ids.

Units: the contract speaks int64 ns (offsets from the capture window start); upstream speaks
float ms. :func:`ns_to_ms` / :func:`ms_to_ns` are the only conversions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from unirl_replay.errors import TraceFormatError
from unirl_replay.v1 import manifest_pb2, workload_pb2

SAMPLE_SEP = "#s"
WARMUP_PREFIX = "warmup:"


def ns_to_ms(ns: int) -> float:
    """Contract ns -> upstream ms (float)."""
    return ns / 1e6


def ms_to_ns(ms: float) -> int:
    """Upstream ms -> contract ns, rounded to the nearest ns."""
    return int(round(ms * 1e6))


def sequence_id(request_id: str, sample: int, num_samples: int) -> str:
    """Upstream request id of one sample: the request id itself when n == 1, else
    ``f"{request_id}#s{sample}"`` (fan-out: n sequences sharing the prompt)."""
    return request_id if num_samples == 1 else f"{request_id}{SAMPLE_SEP}{sample}"


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
            :class:`SequenceMap`, computed from the id, no table). For mooncake, aligned with the
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
    _rows: list[dict] | None = field(default=None, repr=False)

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
        self._rows = None

    def write(self, path: str | Path) -> Path:
        """Write the upstream input file (JSON Lines; header first for agentic_mooncake),
        streaming rows as they are produced."""
        path = Path(path)
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        with open(path, "w", encoding="utf-8", buffering=1 << 20) as f:
            if self.header is not None:
                f.write(dumps(self.header) + "\n")
            w = f.write
            for r in self.iter_rows():
                w(dumps(r))
                w("\n")
        return path


def _prompt_count(p, block_size: int) -> tuple[int, bool]:
    if p.HasField("prefix") and p.prefix.block_hashes:
        return len(p.prefix.block_hashes), True
    return -(-p.input_tokens // block_size), False


def dense_prompt_ids(prompts: Sequence, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense block ids of every prompt (Request or CacheWarmup), exactly as one
    :class:`HashRemap` called prompt by prompt in this order would give them (first-seen order;
    fresh ids for a prompt without hashes), computed with one numpy sort instead of a dict.

    Returns:
        (ids, offsets): prompt i's ids are ``ids[offsets[i]:offsets[i + 1]]`` (uint32 when they
        fit, else int64; 4 bytes per block).
    """
    n = len(prompts)
    counts = np.empty(n, np.int64)
    hashed = np.empty(n, np.bool_)
    for i, p in enumerate(prompts):
        counts[i], hashed[i] = _prompt_count(p, block_size)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    dtype = np.uint32 if total < 2**32 else np.int64
    keys = np.empty(total, np.uint64)
    for i in np.flatnonzero(hashed).tolist():
        keys[offsets[i]:offsets[i + 1]] = prompts[i].prefix.block_hashes
    fresh = None if hashed.all() else np.repeat(~hashed, counts)
    if fresh is None:
        realpos = None
    else:
        realpos = np.flatnonzero(~fresh)
        keys = keys[realpos]
    perm = np.argsort(keys)  # equal hashes -> one group; first occurrence = min position in it
    keys = keys[perm]
    if len(keys):
        start = np.empty(len(keys), np.bool_)
        start[0] = True
        np.not_equal(keys[1:], keys[:-1], out=start[1:])
        starts = np.flatnonzero(start)
        del start
    else:
        starts = np.zeros(0, np.int64)
    del keys
    first = np.minimum.reduceat(perm, starts) if len(starts) else starts
    sizes = np.diff(starts, append=len(perm))
    del starts
    if realpos is not None:
        first = realpos[first]
    isfirst = np.zeros(total, np.bool_) if fresh is None else fresh.copy()
    isfirst[first] = True
    rank = np.cumsum(isfirst, dtype=np.int64)
    del isfirst
    rank -= 1
    ids = np.empty(total, dtype)
    group_ids = np.repeat(rank[first].astype(dtype), sizes)
    if realpos is None:
        ids[perm] = group_ids
    else:
        ids[realpos[perm]] = group_ids
        ids[fresh] = rank[fresh]
    return ids, offsets


class SequenceMap(Mapping):
    """Upstream request id -> (request_id, sample) of one engine's real rows, computed from the id
    (``request_id`` or ``request_id#s<i>``, see :func:`sequence_id`) instead of stored per row.

    Generated ids are unique (checked at conversion), so the parse is unambiguous; warm-up ids
    and ids of requests outside this engine's plan are not keys.
    """

    def __init__(self, by_id: Mapping, plays: Mapping[str, list[str]], play_order: Sequence[str],
                 warmup_keys: Sequence[str], play_of: Callable, include_real: bool = True) -> None:
        self._by_id, self._plays, self._order = by_id, plays, play_order
        self._warm, self._play_of, self._real = frozenset(warmup_keys), play_of, include_real

    def _member(self, r) -> bool:
        return r.request_id in self._plays.get(self._play_of(r), ())

    def __getitem__(self, sid: str) -> tuple[str, int]:
        if self._real and sid not in self._warm:
            r = self._by_id.get(sid)
            if r is not None and r.num_samples == 1 and self._member(r):
                return sid, 0
            rid, sep, k = sid.rpartition(SAMPLE_SEP)
            if sep and k.isdigit() and str(int(k)) == k:
                r = self._by_id.get(rid)
                if r is not None and r.num_samples > 1 and int(k) < r.num_samples and self._member(r):
                    return rid, int(k)
        raise KeyError(sid)

    def __iter__(self) -> Iterator[str]:
        if not self._real:
            return
        for play in self._order:
            for rid in self._plays[play]:
                n = self._by_id[rid].num_samples
                for s in range(n):
                    yield sequence_id(rid, s, n)

    def __len__(self) -> int:
        if not self._real:
            return 0
        return sum(self._by_id[rid].num_samples for play in self._order for rid in self._plays[play])


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
