"""The types of the shard records ``capture finalize`` reads (a JSON Schema per record ``kind``).

The hooks write these records (``shard.ShardWriter``: one JSON object per line); ``finalize`` reads
them. A record whose field has another type than the hooks write (a hand-edited or corrupted shard:
``"enter": []``, ``"engine_id": {}``, ``"n": 1.5``, NaN, an integer past 2^64) is refused here, naming
the shard, its line and the field (``capture.shard_record``), never met later as a traceback inside
the join. Permissive on purpose: only the fields ``finalize`` reads are typed, a field the hooks may
leave out or write as ``null`` may be absent or null, and keys or kinds this reader does not know are
kept (a newer hook may add them).

What the join reads without a default is required, and not null where it is used as a value:
every key ``finalize`` subscripts (``rec["k"]``) is in its kind's ``required``, and a value it turns
into a number (``int(rec["n"])``) or iterates (``for r in rec.get("rollout_ids", [])``) is never
``null`` (a record without its ``pipe_request_id``, a collect's ``"n": null``, a submit's
``"rollout_ids": null`` were KeyError / TypeError tracebacks). :data:`REQUIRED` lists them, per kind,
as dotted paths (``requests.*.n``: every item of the array), with whether ``null`` is refused too;
``tests/test_capture_finalize_inputs.py`` drops and nulls each one.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

__all__ = ["record_problem", "required_fields", "SCHEMAS"]

_NULL = {"type": "null"}
#: seconds (or ms): finalize turns a time, a difference of two and a duration into int64 ns (int(s * 1e9)); a bound
#: of 4e9 s (year 2096 as a wall clock, 126 years of uptime) keeps even a difference of two in int64 ns (1e15 s was
#: a ValueError traceback "Value out of range" out of protobuf)
_MAX_S = 4e9
_NUM = {"type": "number", "minimum": -_MAX_S, "maximum": _MAX_S}
_COUNT = {"type": "integer", "minimum": 0, "maximum": (1 << 32) - 1}
_INT = {"type": "integer", "minimum": -(1 << 63), "maximum": (1 << 63) - 1}
#: a count the hooks copy from UniRL's own objects as it holds it (RolloutManager._group_size, the pool's _capacities):
#: an integral number, 8 or 8.0 (finalize reads it with int()); the hooks' own integers are Python ints (_COUNT)
_UNIRL_COUNT = {"type": "number", "minimum": 0, "maximum": (1 << 32) - 1, "multipleOf": 1}
_HASH = {"type": "integer", "minimum": 0, "maximum": (1 << 64) - 1}
_STR = {"type": "string"}
_ID = {"type": ["string", "integer"]}


def _opt(schema: dict) -> dict:
    return {"anyOf": [schema, _NULL]}


def _obj(props: dict, required: tuple = ()) -> dict:
    return {"type": "object", "properties": props, "required": list(required)}


def _arr(items: dict) -> dict:
    return {"type": "array", "items": items}


#: a process's clock pair: time.monotonic() and time.time() are >= 0 (a negative one put the window start past int64 ns)
_TIME = _obj({"monotonic": _NUM | {"minimum": 0}, "wall": _NUM | {"minimum": 0}}, ("monotonic",))
#: a time the join reads (a call's enter / exit, a mark): CLOCK_MONOTONIC is > 0, and 0.0 reads as "unset"
_AT = _obj({"monotonic": _NUM | {"exclusiveMinimum": 0}, "wall": _NUM}, ("monotonic",))
#: vLLM's RequestStateStats as the hook writes it (``type`` and any other key kept; the timestamps typed)
_METRICS = _opt({"type": "object", "properties": {
    k: _opt(_NUM) for k in ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")}})
_ROLLOUTS = _opt(_arr(_INT))
#: rollout ids the join iterates with a default for an absent key only (``rec.get("rollout_ids", [])``): never null
_ROLLOUT_LIST = _arr(_INT)

#: one engine's process tree as procfs.process_tree writes it (CPU time bounded: end - start must fit int64)
_TREE = {"type": "object", "properties": {
    "cpu_ns": {"type": "integer", "minimum": 0, "maximum": 1 << 62}, "age_s": _opt(_NUM),
    "processes": _arr(_obj({"pid": _INT, "comm": _STR, "threads": _COUNT, "cpu_ns": _opt(_INT),
                            "affinity": {"type": "object", "additionalProperties": _COUNT},
                            "env": {"type": "object", "additionalProperties": _STR}})),
    "env": {"type": "object", "additionalProperties": _STR}}}
#: the host's CPU identity as procfs.cpu_signature writes it (manifest.CpuSignature's fields)
_CPU_SIGNATURE = {"type": "object", "properties": {
    "vendor_id": _STR, "cpu_family": _COUNT, "model": _COUNT, "stepping": _COUNT, "microcode": _STR,
    "flags_digest": _STR, "isa_flags": _arr(_STR), "isa_flags_checked": _arr(_STR)}}
#: a mark's host + engine snapshot (procfs.snapshot); one holding "error" is not read (window_conditions._snap)
_SNAPSHOT = {"type": "object",
             "if": {"required": ["error"]},
             "else": {"properties": {"monotonic": _opt(_NUM), "wall": _opt(_NUM), "loadavg": _opt(_arr(_NUM)),
                                     "stat": _opt(_arr(_INT)), "cpu_signature": _opt(_CPU_SIGNATURE),
                                     "engines": _opt({"type": "object", "additionalProperties": _TREE})}}}
_MARK = _obj({"at": _AT, "rollout_ids": _ROLLOUTS, "probe_id": _opt(_ID), "conditions": _opt(_SNAPSHOT)}, ("at",))

SCHEMAS: dict[str, dict] = {
    "process": _obj({"role": _opt(_STR), "host": _opt(_STR), "pid": _opt(_INT), "boot_id": _opt(_STR),
                     "salt_id": _opt(_STR),  # a set member (finalize: the salt id of the shards): a list was a TypeError
                     "engine_id": _opt(_STR), "clock_pair": _opt(_TIME), "unirl_rank": _opt(_ID),
                     "versions": _opt({"type": "object", "additionalProperties": _opt(_STR)}),
                     "hardware": _opt({"type": "object", "properties": {
                         "cpu_count": _opt(_COUNT), "memory_bytes": _opt(_COUNT | {"maximum": (1 << 63) - 1}),
                         "description": _opt(_STR), "cpu_model": _opt(_STR), "accelerator": _opt(_STR),
                         "accelerator_count": _opt(_COUNT)}})}),  # finalize reads it too (a -1 was a ValueError)
    "process_end": _obj({"capture_cost_s": _opt(_NUM), "records": _opt(_COUNT), "clock_pair": _opt(_TIME)}),
    # config.block_size: the manifest's EngineConfig.block_size_tokens and every request's prefix block size; 0 or
    # none wrote a trace validate refuses (manifest.engine, prefix.block_size)
    "engine_config": _obj({"engine_id": _STR, "config": {"type": "object", "properties": {
        "block_size": _COUNT | {"minimum": 1}, **{
            k: _opt(_COUNT) for k in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                                      "tensor_parallel_size")}}, "required": ["block_size"]},
        "model": _opt({"type": "object", "properties": {
            k: _opt(_COUNT) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                                      "vocab_size", "intermediate_size")}})}, ("engine_id", "config")),
    "engine_generate": _obj({
        "engine_id": _STR, "pipe_request_id": _opt(_ID), "block_size": _opt(_COUNT),
        "pipe_recv_monotonic": _opt(_NUM), "call_monotonic": _opt(_arr(_NUM)),
        "requests": _arr(_obj({
            "position": _INT, "vllm_request_id": _ID, "n": _COUNT | {"minimum": 1},
            "prompt_tokens": _COUNT, "output_tokens": _arr(_COUNT), "finish_reasons": _arr(_opt(_STR)),
            "num_cached_tokens": _opt(_COUNT), "max_tokens": _opt(_COUNT), "metrics": _METRICS,
            "per_sample_metrics": _opt(_arr(_METRICS)), "prefix_hashes": _opt(_arr(_HASH))},
            ("position", "vllm_request_id", "n", "prompt_tokens", "output_tokens", "finish_reasons")))},
        # the join key (engine id, pipe request id): the hook writes the pipe request id, null when it is unknown
        ("engine_id", "pipe_request_id", "requests")),
    "engine_call": _obj({
        "call_id": _ID, "engine_id": _opt(_STR), "pipe_request_id": _opt(_ID), "sample_ids": _arr(_STR),
        "parent_ids": _opt(_arr(_ID)), "rollout_ids": _ROLLOUTS, "output_version": _opt(_INT),
        "trajectory_id": _opt(_STR), "turn": _opt(_COUNT), "enter": _AT, "exit": _AT, "error": _opt(_STR)},
        ("call_id", "engine_id", "pipe_request_id", "sample_ids", "enter", "exit")) | {
        # a call of a trajectory carries its turn (the join reads both)
        "if": {"properties": {"trajectory_id": {"type": "string", "minLength": 1}}, "required": ["trajectory_id"]},
        "then": {"properties": {"turn": _COUNT}, "required": ["turn"]}},
    "engine_capture_cost": _obj({"engine_id": _opt(_STR), "pipe_request_id": _opt(_ID), "self_s": _opt(_NUM)}),
    "capture_warning": _obj({"what": _opt(_STR)}),
    "trajectory": _obj({"trajectory_id": _STR, "engine_id": _opt(_STR), "rollout_ids": _ROLLOUTS,
                        "group": {"anyOf": [_STR, _arr(_STR)]}, "turns": _opt(_COUNT),
                        "slot_hold": _obj({"start": _AT, "end": _AT}, ("start", "end"))},
                       ("trajectory_id", "group", "slot_hold")),  # the hook always writes its group (the join reads it)
    "env_step": _obj({"trajectory_id": _opt(_STR), "turn": _INT, "start": _AT, "end": _AT,
                      "duration_s": _NUM, "tool_calls": _opt(_COUNT)}, ("duration_s",)) | {
        # a step of a trajectory is keyed by its turn (the join reads both)
        "if": {"properties": {"trajectory_id": {"type": "string", "minLength": 1}}, "required": ["trajectory_id"]},
        "then": {"required": ["turn"]}},
    "submit": _obj({"submit_id": _opt(_ID), "tasks": _opt(_COUNT), "groups": _opt(_arr(_STR)),
                    "rollout_ids": _ROLLOUT_LIST, "at": _AT, "group_size": _opt(_UNIRL_COUNT)}, ("at",)),
    # n: the batch's RolloutBatch.required_groups (FIRST_N_GROUPS: 1..its groups; "n": 0 wrote a trace validate
    # refuses, batch.required_groups); collect_id: the batch's id when its rollout ids do not name it
    "collect": _obj({"collect_id": _ID, "n": _COUNT | {"minimum": 1}, "current_version": _opt(_INT), "enter": _AT,
                     "exit": _AT, "group_size": _opt(_UNIRL_COUNT), "capacities": _opt(_arr(_UNIRL_COUNT)),
                     "groups": _arr(_obj({"rollout_ids": _ROLLOUT_LIST, "roots": _arr(_STR),
                                          "trajectory_ids": _arr(_opt(_STR))}, ("roots", "trajectory_ids")))},
                    ("collect_id", "n", "enter", "exit", "groups")),
    "rollout_generate": _obj({"dispatch_id": _ID, "groups": _opt(_arr(_STR)), "rollout_ids": _ROLLOUTS,
                              "samples": _opt(_COUNT), "enter": _AT, "exit": _AT, "error": _opt(_STR)},
                             ("dispatch_id", "enter", "exit")),
    "window_start": _MARK, "window_end": _MARK, "probe_start": _MARK, "probe_end": _MARK,
    # the reference probe's generate calls (read by capture.probe.probe_points and window_conditions)
    "probe_generate": _obj({
        "engine_id": _STR, "pipe_request_id": _opt(_ID),
        "probe": _obj({"probe_id": _ID, "when": _opt(_STR), "point": _STR, "repeat": _opt(_INT), "phase": _opt(_STR),
                       "batch_size": _opt(_COUNT), "context_tokens": _opt(_COUNT), "prefill_tokens": _opt(_COUNT)}),
        "call_monotonic": {"type": "array", "items": _NUM, "minItems": 2},
        "requests": _arr(_obj({"prompt_tokens": _opt(_COUNT), "output_tokens": _arr(_COUNT), "metrics": _METRICS}))},
        ("engine_id", "probe", "call_monotonic", "requests")),
    "labels": _obj({"labels": _opt({"type": "object"})}),
    "model_identity": _obj({"name": _opt(_STR)}),
    # the reference driver's measure_pairs, which finalize copies into TraceManifest.capture_overhead (it was
    # read unchecked: a pairs of "x" or -3, a missing method were ValueError / KeyError tracebacks, a ratio of
    # "NaN" an invalid trace written)
    "overhead_pairs": _obj({"pairs": _COUNT, "method": _STR, "overhead_ratio": _NUM | {"minimum": -1},
                            "instrumented_wall_ns": _COUNT | {"maximum": (1 << 63) - 1},
                            "plain_wall_ns": _COUNT | {"maximum": (1 << 63) - 1}},
                           ("pairs", "method", "overhead_ratio", "instrumented_wall_ns", "plain_wall_ns")),
}


def _required(schema: dict, prefix: str) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    if "anyOf" in schema:  # a value or null: what the value requires when it is there
        for branch in schema["anyOf"]:
            if branch is not _NULL:
                out += _required(branch, prefix)
        return out
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return _required(schema["items"], f"{prefix}*.")
    props = schema.get("properties", {})
    for k in schema.get("required", ()):
        sub = props.get(k, {})
        out.append((prefix + k, any(b is _NULL for b in sub.get("anyOf", ()))))
    for k, sub in props.items():
        out += _required(sub, f"{prefix}{k}.")
    return out


def required_fields(kind: str) -> list[tuple[str, bool]]:
    """The keys a record of ``kind`` must have, unconditionally, as dotted paths (``requests.*.n``: in every item of
    ``requests``; ``enter.monotonic``: in ``enter``, which is itself required or typed) with whether they may be
    ``null``; in schema order. Conditional ones (an ``engine_call`` / ``env_step`` of a trajectory needs its
    ``turn``) are in the kind's ``if`` / ``then``."""
    return _required(SCHEMAS[kind], "")


@functools.cache
def _validator(kind: str):
    import jsonschema

    # "integer" as the hooks write one (json.dumps of a Python int): JSON Schema's own also accepts 26.0, which
    # finalize then met as a float where an int goes (a slice index, a protobuf uint32: a TypeError traceback)
    strict = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict)
    return cls(SCHEMAS[kind])


def _non_finite(x: Any) -> Optional[str]:
    """The path of a NaN / infinite number in ``x`` (JSON has none; Python's json reads them), else None."""
    if isinstance(x, float) and not math.isfinite(x):
        return ""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        sub = _non_finite(v)
        if sub is not None:
            return f"{k}" + (f".{sub}" if sub else "")
    return None


def record_problem(rec: Any) -> Optional[str]:
    """Why one parsed shard line is no record ``finalize`` can read (``path: message``), or None."""
    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not a JSON object"
    kind = rec.get("kind")
    if not isinstance(kind, str):
        return f"kind: {kind!r} is not a record kind (a string)"
    where = _non_finite(rec)
    if where is not None:
        return f"{where}: NaN or an infinite number (not JSON)"
    if kind not in SCHEMAS:
        return None  # a kind this reader does not read (a newer hook's): kept, never used
    err = next(iter(sorted(_validator(kind).iter_errors(rec), key=lambda e: [str(p) for p in e.absolute_path])), None)
    if err is None:
        return None
    while err.context:  # an anyOf (a value or null): the deepest reason of the branch that got furthest
        err = max(err.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    path = ".".join(str(p) for p in err.absolute_path) or "(record)"
    return f"{path}: {err.message[:200]}"
