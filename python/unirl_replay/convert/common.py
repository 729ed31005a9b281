"""Pieces both converters share: the conversion result, hash remapping, units, sequence ids.

Units: the contract speaks int64 ns (offsets from the capture window start); upstream speaks
float ms. :func:`ns_to_ms` / :func:`ms_to_ns` are the only conversions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

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

    Attributes:
        trace_format: ``"agentic_mooncake"`` (v2) or ``"mooncake"``.
        engine_id: the engine replayed.
        header: agentic_mooncake header object (None for mooncake).
        rows: upstream rows in file order (warm-ups first), JSON-ready dicts (numbers in ms).
        sequences: for agentic_mooncake, upstream request id -> (request_id, sample index). For
            mooncake, aligned with the real rows (``rows[len(warmup_keys):]``) in order.
        warmup_keys: upstream ids (agentic) of the warm-up rows; their count for mooncake.
        lanes: ``agentic_lanes`` to pass (trajectory slots), or None.
        block_size: engine KV block size in tokens (= header block size / trace_block_size).
        origin_ns: capture-clock offset (ns) that became simulated 0 (this engine's first
            observed arrival).
        lead_ms: warm-up lead: real arrivals were shifted by it; subtract it from every result.
        notes: readable notes for the result.
    """

    trace_format: str
    engine_id: str
    header: dict | None
    rows: list[dict]
    sequences: dict[str, tuple[str, int]] | list[tuple[str, int]]
    warmup_keys: list[str]
    lanes: int | None
    block_size: int
    origin_ns: int
    lead_ms: float = 0.0
    notes: list[str] = field(default_factory=list)

    def write(self, path: str | Path) -> Path:
        """Write the upstream input file (JSON Lines; header first for agentic_mooncake)."""
        path = Path(path)
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        with open(path, "w", encoding="utf-8") as f:
            if self.header is not None:
                f.write(dumps(self.header) + "\n")
            f.writelines(dumps(r) + "\n" for r in self.rows)
        return path


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
