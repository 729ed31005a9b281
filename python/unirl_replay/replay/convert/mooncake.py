"""Workload -> Dynamo Replay ``mooncake`` (open loop: observed arrivals, single engine).

Pure: reads only workload messages. Rows: ``timestamp`` (ms from this engine's first observed
arrival, plus the warm-up lead), ``input_length``, ``output_length`` (the sample's actual
length), ``hash_ids`` (one per ``block_size`` tokens; pass ``trace_block_size = block_size``).
A request with n samples becomes n rows with the same timestamp and hash ids.

mooncake rows do not echo ids; :func:`match_rows` maps upstream rows back by their signature
(arrival, input length, output length). When two different requests share a signature the
mapping is ambiguous and the replay result is AGGREGATE_ONLY (nothing per request is guessed).
"""

from __future__ import annotations

from unirl_replay.replay.convert.common import Conversion, dense_prompt_ids, ns_to_ms, origin_of
from unirl_replay.replay.workload import EnginePlan, WorkloadIndex

FORMAT = "mooncake"


def convert_engine(plan: EnginePlan, index: WorkloadIndex, *, lead_ms: float = 0.0,
                   digest: str = "", include_real: bool = True) -> Conversion:
    """Convert one engine's open-loop workload to mooncake rows (see module doc).

    ``sequences`` is a list aligned with the real rows: (request_id, sample index).
    """
    bs = plan.engine.block_size_tokens
    warm = [w.warmup_id for w in plan.warmups]
    reqs = plan.requests if include_real else []
    seqs: list[tuple[str, int]] = [(r.request_id, s) for r in reqs for s in range(r.num_samples)]
    ids, offsets = dense_prompt_ids([*plan.warmups, *reqs], bs)
    origin = plan.first_arrival_ns if plan.first_arrival_ns is not None else origin_of(plan.requests)

    def produce():
        for k, w in enumerate(plan.warmups):
            yield {"timestamp": 0.0, "input_length": w.input_tokens, "output_length": 0,
                   "hash_ids": ids[offsets[k]:offsets[k + 1]].tolist()}
        for k, r in enumerate(reqs, start=len(plan.warmups)):
            hids = ids[offsets[k]:offsets[k + 1]].tolist()
            ts = lead_ms + ns_to_ms(r.arrival.observed_offset_ns - origin)
            for s in range(r.num_samples):
                yield {"timestamp": ts, "input_length": r.input_tokens,
                       "output_length": r.output_tokens[s], "hash_ids": hids}

    def signatures():
        for r in reqs:
            ts = lead_ms + ns_to_ms(r.arrival.observed_offset_ns - origin)
            for s in range(r.num_samples):
                yield _sig(ts, r.input_tokens, r.output_tokens[s])

    return Conversion(trace_format=FORMAT, engine_id=plan.engine.engine_id, header=None,
                      sequences=seqs, warmup_keys=warm, lanes=None, block_size=bs,
                      origin_ns=origin, lead_ms=lead_ms, produce=produce, signatures=signatures)


def _sig(arrival_ms: float, input_length: int, output_length: int) -> tuple:
    return (round(arrival_ms * 1e3), int(input_length), int(output_length))  # 1 us resolution


def match_rows(conv: Conversion, rows: list[dict]) -> dict[tuple[str, int], dict] | None:
    """Map upstream per-request rows back to (request_id, sample).

    Returns None when a signature is shared by different requests (ambiguous), else a dict.
    Warm-up rows (arrival 0, before the lead) are dropped. Samples of
    one request share a signature only when they are interchangeable (same prompt, arrival and
    length), so they are assigned in order.
    """
    nwarm = len(conv.warmup_keys)
    want: dict[tuple, list[tuple[str, int]]] = {}
    for sig, key in zip(conv.signatures(), conv.sequences):
        want.setdefault(sig, []).append(key)
    if any(len({k[0] for k in keys}) > 1 for keys in want.values()):
        return None
    got: dict[tuple, list[dict]] = {}
    for row in sorted(rows, key=lambda x: (x["arrival_time_ms"], x.get("first_admit_ms") or 0, x["uuid"])):
        if nwarm and row["arrival_time_ms"] < conv.lead_ms:  # warm-ups run at 0, before the lead
            continue
        got.setdefault(_sig(row["arrival_time_ms"], row["input_length"], row["output_length"]), []).append(row)
    out: dict[tuple[str, int], dict] = {}
    for sig, keys in want.items():
        rs = got.get(sig, [])
        if len(rs) != len(keys):
            return None
        out.update(zip(keys, rs))
    return out
