"""A minimal violating example for every rule of the registry, and the valid traces they edit.

Each :class:`Example` starts from one of three small **valid** traces given here as their JSON lines
(:data:`BASES`: ``grpo``, the interop trace of bindings/README.md; ``agentic``, one closed-loop
trajectory of two turns; ``batches``, two rollout batches, the second submitted only after the first
was ready: ``RolloutBatch.after_batch``), applies a few edits to the files, re-digests the manifest (unless the
example is about digests) and names the rule ``validate`` then reports. docs/validation-rules.md
is rendered from these (``python -m unirl_replay.contract.validate.docs``) and
tests/test_rule_examples.py materializes each one and checks that its rule fires, so the docs
cannot drift from the code. An example may make other rules fire too (a removed record is also a
dangling reference); the rule it names always does.

Edits (applied in order; ``line`` is 1-based in the record file, ``path`` is dotted with ``[i]``
indexes into the line's JSON, ``[n]`` with n = the list's length appends):

===================================  ===================================================
``("set", file, line, path, value)``  set a key (``value`` is JSON: ``None`` writes null)
``("del", file, line, path)``         remove a key
``("rename", file, line, path, key)`` rename a key, keeping its value and position
``("append", file, record)``          add a line at the end
``("dup", file, line)``               add a copy of a line at the end
``("drop", file, line)``              remove a line
``("text", file, old, new)``          replace text in the file (first occurrence)
``("bytes", file, hex)``              append raw bytes
``("cut", file, n)``                  remove the last ``n`` bytes
``("rm", file)`` / ``("touch", file)``  remove / create (empty) a file
``("wrap", file, old, n)``            wrap the first ``old`` in ``n`` nested JSON arrays
``("pad", file, line, n)``            ``n`` spaces before the newline of a line (line 0 of
                                      the manifest: at its end, after the re-digest)
``("fifo", file)``                    replace the file by a named pipe (after the re-digest)
``("symlink", file)``                 replace the file by a symbolic link to a copy of it
``("chmod", file, mode)``             set the file's mode (root reads it anyway)
===================================  ===================================================

Edits of ``manifest.json`` (line 0) apply after the re-digest.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl_replay.contract.compat import CONTRACT_REVISION
from unirl_replay.contract import json_profile
from unirl_replay.contract.trace_io import MANIFEST_FILE, encode_varint, sha256_file
from unirl_replay.v1.outcomes_pb2 import OutcomeRecord
from unirl_replay.v1.workload_pb2 import WorkloadRecord

__all__ = ["BASES", "EXAMPLES", "Example", "materialize"]

_MANIFEST: dict[str, Any] = {
    "schema_version": "unirl_replay.v1", "trace_id": "example",
    "producer": {"name": "unirl-replay-interop", "version": "1"},
    "provenance": {"unirl_version": "0.2.0", "inference_backend": "vllm", "inference_backend_version": "0.28.0",
                   "simulator_name": "ai-dynamo", "simulator_version": "1.6.1"},
    "model": {"name": "tiny", "architecture": "qwen2", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_kv_heads": 2, "vocab_size": 1000},
    "engines": [{"engine_id": "e0", "worker_ids": ["w0"], "tp_size": 1, "block_size_tokens": 16, "num_kv_blocks": 1024,
                 "max_num_seqs": 8, "max_num_batched_tokens": 2048, "max_model_len": 4096, "dtype": "float32"}],
    "hardware": {"description": "interop", "accelerator": "cpu", "cpu_count": 2, "memory_bytes": "25000000000"},
    "policy": {"policy_version": "0", "checkpoint": "ckpt"},
    "window": {"start_unix_ns": "1700000000000000000", "duration_ns": "60000000000",
               "clock_domain": "CLOCK_DOMAIN_CAPTURE_MONOTONIC"},
    "privacy": {"content": "CONTENT_POLICY_EXCLUDED", "hash_salt_id": "salt0", "hash_algorithm": "test"},
    "role": "WORKLOAD_ROLE_UNLABELLED", "workload_name": "interop", "cache_state": "CACHE_STATE_KIND_COLD",
    "created_at": "2026-01-01T00:00:00Z", "contract_revision": CONTRACT_REVISION,
}

_STOP = "FINISH_REASON_STOP"
#: base name -> (workload lines, outcome lines); the manifest is :data:`_MANIFEST` plus the artifacts.
BASES: dict[str, tuple[list[dict], list[dict]]] = {
    "grpo": (
        [{"request": {"request_id": "req-0", "sample_ids": ["req-0/s0", "req-0/s1"], "num_samples": 2, "group_id": "g0",
                      "rollout_batch_id": "b0", "engine_id": "e0", "worker_id": "w0", "policy_version": "0",
                      "input_tokens": 40, "output_tokens": [8, 5],
                      "prefix": {"block_size_tokens": 16,
                                 "block_hashes": ["18446744073709551615", "1", "9007199254740993"]},
                      "arrival": {"observed_offset_ns": "0"}, "finish_reasons": [_STOP, "FINISH_REASON_LENGTH"],
                      "max_output_tokens": 8}},
         {"group": {"group_id": "g0", "rollout_batch_id": "b0", "unit": "GROUP_UNIT_SAMPLES", "expected_size": 2,
                    "member_ids": ["req-0"]}},
         {"rollout_batch": {"rollout_batch_id": "b0", "group_ids": ["g0"],
                            "readiness_rule": "BATCH_READINESS_RULE_ALL_GROUPS", "engine_ids": ["e0"]}}],
        [{"request": {"request_id": "req-0", "submit_ns": "0", "queued_ns": "1000", "scheduled_ns": "2000",
                      "first_token_ns": "5000000", "completion_ns": "9000000", "cached_tokens": 0,
                      "samples": [{"sample_id": "req-0/s0", "first_token_ns": "5000000", "completion_ns": "9000000"},
                                  {"sample_id": "req-0/s1", "first_token_ns": "5000000", "completion_ns": "7000000"}]}},
         {"group": {"group_id": "g0", "completed_ns": "9000000"}},
         {"rollout_batch": {"rollout_batch_id": "b0", "ready_ns": "9000000"}}],
    ),
    "agentic": (
        [{"slot_pool": {"pool_id": "pool0", "engine_ids": ["e0"], "worker_id": "w0", "trajectory_slots": 1}},
         {"engine_client": {"engine_id": "e0", "inflight_request_limit": 1}},
         {"request": {"request_id": "traj-0/t0", "sample_ids": ["root-0"], "num_samples": 1, "trajectory_id": "traj-0",
                      "turn_index": 0, "group_id": "g0", "rollout_batch_id": "b0", "engine_id": "e0",
                      "worker_id": "w0", "policy_version": "0", "input_tokens": 16, "output_tokens": [4],
                      "prefix": {"block_size_tokens": 16, "block_hashes": ["11"]},
                      "arrival": {"observed_offset_ns": "0"}, "finish_reasons": [_STOP]}},
         {"request": {"request_id": "traj-0/t1", "sample_ids": ["root-0"], "num_samples": 1, "trajectory_id": "traj-0",
                      "turn_index": 1, "group_id": "g0", "rollout_batch_id": "b0", "engine_id": "e0",
                      "worker_id": "w0", "policy_version": "0", "input_tokens": 32, "output_tokens": [4],
                      "prefix": {"block_size_tokens": 16, "block_hashes": ["11", "12"]},
                      "arrival": {"after_dependencies": {}},
                      "dependencies": [{"predecessor_request_id": "traj-0/t0",
                                        "trigger": "DEPENDENCY_TRIGGER_COMPLETION",
                                        "relation": "DEPENDENCY_RELATION_SEQUENCE", "external_delay_ns": "1000000"}],
                      "finish_reasons": [_STOP]}},
         {"trajectory": {"trajectory_id": "traj-0", "group_id": "g0", "rollout_batch_id": "b0", "engine_id": "e0",
                         "worker_id": "w0", "slot_pool_id": "pool0", "request_ids": ["traj-0/t0", "traj-0/t1"],
                         "root_sample_id": "root-0", "start_order": 0}},
         {"group": {"group_id": "g0", "rollout_batch_id": "b0", "unit": "GROUP_UNIT_TRAJECTORIES", "expected_size": 1,
                    "member_ids": ["traj-0"]}},
         {"rollout_batch": {"rollout_batch_id": "b0", "group_ids": ["g0"],
                            "readiness_rule": "BATCH_READINESS_RULE_ALL_GROUPS", "engine_ids": ["e0"]}}],
        [{"request": {"request_id": "traj-0/t0", "submit_ns": "0", "queued_ns": "1000", "scheduled_ns": "2000",
                      "first_token_ns": "3000000", "completion_ns": "5000000", "cached_tokens": 0}},
         {"request": {"request_id": "traj-0/t1", "submit_ns": "6000000", "queued_ns": "6001000",
                      "scheduled_ns": "6002000", "first_token_ns": "8000000", "completion_ns": "9000000",
                      "cached_tokens": 16}},
         {"trajectory": {"trajectory_id": "traj-0", "slot_acquired_ns": "0", "slot_released_ns": "9000000",
                         "tool_durations_ns": ["1000000"]}},
         {"group": {"group_id": "g0", "completed_ns": "9000000"}},
         {"rollout_batch": {"rollout_batch_id": "b0", "ready_ns": "9000000"}}],
    ),
    "batches": (
        [{"request": {"request_id": "req-0", "sample_ids": ["req-0/s0"], "num_samples": 1, "group_id": "g0",
                      "rollout_batch_id": "b0", "engine_id": "e0", "worker_id": "w0", "policy_version": "0",
                      "input_tokens": 16, "output_tokens": [4],
                      "prefix": {"block_size_tokens": 16, "block_hashes": ["21"]},
                      "arrival": {"observed_offset_ns": "0"}, "finish_reasons": [_STOP]}},
         {"group": {"group_id": "g0", "rollout_batch_id": "b0", "unit": "GROUP_UNIT_SAMPLES", "expected_size": 1,
                    "member_ids": ["req-0"]}},
         {"rollout_batch": {"rollout_batch_id": "b0", "group_ids": ["g0"],
                            "readiness_rule": "BATCH_READINESS_RULE_ALL_GROUPS", "engine_ids": ["e0"]}},
         {"request": {"request_id": "req-1", "sample_ids": ["req-1/s0"], "num_samples": 1, "group_id": "g1",
                      "rollout_batch_id": "b1", "engine_id": "e0", "worker_id": "w0", "policy_version": "0",
                      "input_tokens": 16, "output_tokens": [4],
                      "prefix": {"block_size_tokens": 16, "block_hashes": ["22"]},
                      "arrival": {"observed_offset_ns": "12000000"}, "finish_reasons": [_STOP]}},
         {"group": {"group_id": "g1", "rollout_batch_id": "b1", "unit": "GROUP_UNIT_SAMPLES", "expected_size": 1,
                    "member_ids": ["req-1"]}},
         {"rollout_batch": {"rollout_batch_id": "b1", "group_ids": ["g1"],
                            "readiness_rule": "BATCH_READINESS_RULE_ALL_GROUPS", "engine_ids": ["e0"],
                            "after_batch": {"previous_rollout_batch_id": "b0", "driver_gap_ns": "2000000"}}}],
        [{"request": {"request_id": "req-0", "submit_ns": "0", "queued_ns": "1000", "scheduled_ns": "2000",
                      "first_token_ns": "3000000", "completion_ns": "9000000", "cached_tokens": 0}},
         {"group": {"group_id": "g0", "completed_ns": "9000000"}},
         {"rollout_batch": {"rollout_batch_id": "b0", "ready_ns": "10000000"}},
         {"request": {"request_id": "req-1", "submit_ns": "12000000", "queued_ns": "12001000",
                      "scheduled_ns": "12002000", "first_token_ns": "15000000", "completion_ns": "21000000",
                      "cached_tokens": 0}},
         {"group": {"group_id": "g1", "completed_ns": "21000000"}},
         {"rollout_batch": {"rollout_batch_id": "b1", "ready_ns": "22000000"}}],
    ),
}


@dataclass(frozen=True)
class Example:
    """A minimal way to break one rule: edits of a base trace, in one encoding."""

    base: str
    edits: tuple[tuple, ...]
    encoding: str = "jsonl"
    redigest: bool = True


W, O, M = "workload.jsonl", "outcomes.jsonl", MANIFEST_FILE
WB = "workload.binpb"
WA = "workload.arrow"
_DEP = {"predecessor_request_id": "traj-0/t1", "trigger": "DEPENDENCY_TRIGGER_COMPLETION",
        "relation": "DEPENDENCY_RELATION_SEQUENCE", "external_delay_ns": "0"}


def _g(*edits: tuple, **kw: Any) -> Example:
    return Example("grpo", edits, **kw)


def _a(*edits: tuple, **kw: Any) -> Example:
    return Example("agentic", edits, **kw)


def _b(*edits: tuple, **kw: Any) -> Example:
    return Example("batches", edits, **kw)


#: rule id -> its minimal violating example (every rule of the registry has one)
EXAMPLES: dict[str, Example] = {
    "trace.no_manifest": _g(("rm", M)),
    "trace.not_a_trace": _g(("rm", M), ("rm", W), ("rm", O)),
    "trace.partial_files": _g(("touch", W + ".partial")),
    "artifact.missing": _g(("rm", O)),
    "artifact.size": _g(("text", W, "\n", "\n\n"), redigest=False),
    "artifact.digest": _g(("text", W, '"req-0"', '"req-9"'), redigest=False),
    "artifact.record_count": _g(("set", M, 0, "artifacts[0].record_count", "4")),
    "jsonl.truncated": _g(("cut", W, 1)),
    "binpb.truncated": _g(("cut", WB, 1), encoding="binpb"),
    "manifest.schema_version": _g(("set", M, 0, "schema_version", "unirl_replay.v2")),
    "manifest.artifacts": _g(("set", M, 0, "artifacts[1].encoding", "ENCODING_BINPB")),
    "json.parse": _g(("text", W, '{"group"', '{group')),
    "json.profile": _g(("set", W, 1, "request.reasoning_tokens", 7)),
    "jsonl.empty_line": _g(("text", W, "\n", "\n\n")),
    "binpb.frame": _g(("bytes", WB, "ffffffffffffffffffff01"), encoding="binpb"),
    "binpb.decode": _g(("bytes", WB, "02ffff"), encoding="binpb"),
    "arrow.corrupt": _g(("bytes", WA, "00"), encoding="arrow"),
    "arrow.schema": _g(("foreign", WA), encoding="arrow"),
    "arrow.oneof": _g(("set", WA, 1, "trajectory", {"trajectory_id": "t"}), encoding="arrow"),
    "arrow.decode": _g(("row_set", WA, 1, "request.output_tokens", [None]), encoding="arrow"),
    "binpb.unknown_fields": _g(("bytes", WB, "03980601"), encoding="binpb"),
    "json.camel_case_key": _g(("rename", W, 1, "request.rollout_batch_id", "rolloutBatchId")),
    "json.enum_number": _g(("set", W, 1, "request.finish_reasons[0]", 1)),
    "json.int32_string": _g(("set", W, 1, "request.input_tokens", "40")),
    "json.int64_number": _g(("set", W, 1, "request.policy_version", 0)),
    "json.int64_form": _g(("set", W, 1, "request.policy_version", "00")),
    "json.null": _g(("set", W, 1, "request.worker_id", None)),
    "json.duplicate_key": _g(("text", W, '"worker_id":"w0"', '"worker_id":"w0","worker_id":"w0"')),
    "compat.newer_revision": _g(("set", W, 1, "request.reasoning_tokens", 7),
                                ("set", M, 0, "contract_revision", CONTRACT_REVISION + 1)),
    "manifest.window": _g(("del", M, 0, "window.duration_ns")),
    "manifest.engine": _g(("del", M, 0, "engines[0].engine_id")),
    "manifest.created_at": _g(("set", M, 0, "created_at", "yesterday")),
    "manifest.workload_name": _g(("set", M, 0, "workload_name", "interop\u001b[2J")),
    "manifest.conditions": _g(("set", M, 0, "conditions", {"steal_pct": "NaN", "host_busy_pct": 250.0})),
    "manifest.capture_overhead": _g(("set", M, 0, "capture_overhead", {"overhead_ratio": "NaN", "pairs": 4})),
    "manifest.probe_artifact": _g(("set", M, 0, "probes", [{"engine_id": "e0", "when": "before",
                                                            "artifact_path": "probes/e0-before.json"}])),
    "manifest.probe": _g(("set", M, 0, "probes", [{"engine_id": "e0", "when": "before", "points": [
        {"phase": "decode", "batch_size": 1, "context_tokens": 128, "repeats": 5, "median_ms": "NaN"}]}])),
    "record.empty": _g(("append", W, {})),
    "id.empty": _g(("del", W, 2, "group.group_id")),
    "id.duplicate": _g(("dup", W, 3)),
    "enum.unspecified": _g(("set", W, 1, "request.finish_reasons[0]", "FINISH_REASON_UNSPECIFIED")),
    "reference.engine": _g(("set", W, 1, "request.engine_id", "e9")),
    "reference.trajectory": _a(("set", W, 3, "request.trajectory_id", "traj-9")),
    "reference.group": _g(("set", W, 1, "request.group_id", "g9")),
    "reference.batch": _g(("set", W, 1, "request.rollout_batch_id", "b9")),
    "reference.slot_pool": _a(("set", W, 5, "trajectory.slot_pool_id", "pool9")),
    "trajectory.engine": _a(("set", W, 5, "trajectory.engine_id", "e9")),
    "reference.request": _a(("set", W, 5, "trajectory.request_ids[2]", "traj-0/t9")),
    "fanout.count": _g(("set", W, 1, "request.num_samples", 3)),
    "fanout.sample_ids": _g(("set", W, 1, "request.sample_ids[1]", "req-0/s0")),
    "request.input_tokens": _g(("del", W, 1, "request.input_tokens"), ("del", W, 1, "request.prefix")),
    "prefix.count": _g(("set", W, 1, "request.input_tokens", 20)),
    "prefix.block_size": _g(("set", W, 1, "request.prefix.block_size_tokens", 14)),
    "prefix.missing": _g(("del", W, 1, "request.prefix")),
    "cache_warmup.cold_manifest": _g(("append", W, {"cache_warmup": {
        "warmup_id": "wu0", "engine_id": "e0", "input_tokens": 16,
        "prefix": {"block_size_tokens": 16, "block_hashes": ["7"]}}})),
    "cache_warmup.prefix": _g(("append", W, {"cache_warmup": {"warmup_id": "wu0", "engine_id": "e0",
                                                               "input_tokens": 16}}),
                              ("set", M, 0, "cache_state", "CACHE_STATE_KIND_WARM_DECLARED")),
    "arrival.kind_missing": _g(("del", W, 1, "request.arrival")),
    "arrival.mixed_missing": _g(("dup", W, 1), ("set", W, 4, "request.request_id", "req-1"),
                                ("del", W, 4, "request.arrival")),
    "arrival.dependencies": _a(("set", W, 4, "request.arrival", {"observed_offset_ns": "5000000"})),
    "dependency.unresolved": _a(("set", W, 4, "request.dependencies[0].predecessor_request_id", "traj-0/t9")),
    "dependency.cross_trajectory": _a(("dup", W, 3), ("set", W, 8, "request.request_id", "traj-1/t0"),
                                      ("set", W, 8, "request.trajectory_id", "traj-1"),
                                      ("set", W, 4, "request.dependencies[0].predecessor_request_id", "traj-1/t0")),
    "dependency.no_trajectory": _a(("del", W, 4, "request.trajectory_id"), ("del", W, 4, "request.turn_index")),
    "dependency.duplicate": _a(("set", W, 4, "request.dependencies[1]",
                                {**_DEP, "predecessor_request_id": "traj-0/t0"})),
    "dependency.delay_absence": _a(("del", W, 4, "request.dependencies[0].external_delay_ns")),
    "dependency.cycle": _a(("set", W, 4, "request.dependencies[0].predecessor_request_id", "traj-0/t1")),
    "turn.index": _a(("del", W, 4, "request.turn_index")),
    "turn.order": _a(("set", W, 5, "trajectory.request_ids", ["traj-0/t1", "traj-0/t0"])),
    "turn.dependency_order": _a(("set", W, 3, "request.dependencies", [_DEP]),
                                ("set", W, 3, "request.arrival", {"after_dependencies": {}})),
    "trajectory.requests": _a(("set", W, 5, "trajectory.request_ids", ["traj-0/t0"])),
    "group.members": _g(("set", W, 2, "group.member_ids[1]", "req-9")),
    "group.size": _g(("set", W, 2, "group.expected_size", 8)),
    "group.singleton": _a(("set", W, 6, "group.expected_size", 2)),
    "batch.membership": _g(("set", W, 3, "rollout_batch.group_ids", [])),
    "batch.required_groups": _g(("set", W, 3, "rollout_batch.readiness_rule", "BATCH_READINESS_RULE_FIRST_N_GROUPS"),
                                ("set", W, 3, "rollout_batch.required_groups", 3)),
    "batch.boundary_empty": _b(("del", W, 6, "rollout_batch.after_batch.previous_rollout_batch_id")),
    "batch.boundary_unknown": _b(("set", W, 6, "rollout_batch.after_batch.previous_rollout_batch_id", "b9")),
    "batch.boundary_self": _b(("set", W, 6, "rollout_batch.after_batch.previous_rollout_batch_id", "b1")),
    "batch.boundary_cycle": _b(("set", W, 3, "rollout_batch.after_batch",
                                {"previous_rollout_batch_id": "b1", "driver_gap_ns": "0"})),
    "batch.engines": _g(("set", M, 0, "engines[1]", {**_MANIFEST["engines"][0], "engine_id": "e1"}),
                        ("set", W, 3, "rollout_batch.engine_ids", ["e1"])),
    "slot_pool.slots": _a(("del", W, 1, "slot_pool.trajectory_slots")),
    "group.resumed_from": _g(("set", W, 2, "group.resumed_from_rollout_batch_id", "b0")),
    "manifest.completeness": _g(("set", M, 0, "completeness", {"complete": True, "lost": [
        {"kind": "engine_request", "count": "3", "cause": "engine e0 shard ended without process_end"}]})),
    "slot_pool.start_order": _a(("dup", W, 5), ("set", W, 8, "trajectory.trajectory_id", "traj-1"),
                                ("set", W, 8, "trajectory.request_ids", [])),
    "slot_pool.engines": _a(("set", M, 0, "engines[1]", {**_MANIFEST["engines"][0], "engine_id": "e1"}),
                            ("set", W, 1, "slot_pool.engine_ids", ["e1"])),
    "trajectory.start_order": _a(("del", W, 5, "trajectory.start_order")),
    "engine_client.limit": _a(("set", W, 2, "engine_client.inflight_request_limit", 0)),
    "units.negative": _g(("set", W, 1, "request.arrival.observed_offset_ns", "-1")),
    "units.suspect_scale": _g(("set", W, 1, "request.arrival.observed_offset_ns", "10000000000000000")),
    "units.outside_window": _g(("set", W, 1, "request.arrival.observed_offset_ns", "61000000000")),
    "units.suspect_small": _g(("dup", W, 1), ("set", W, 4, "request.request_id", "req-1"),
                              ("set", W, 4, "request.arrival.observed_offset_ns", "5")),
    "time.order": _g(("set", O, 1, "request.queued_ns", "3000")),
    "outcome.unmatched": _g(("append", O, {"group": {"group_id": "g9", "completed_ns": "0"}})),
    # hostile input (contract/json_guard.py, trace_io's readers)
    "json.nan": _g(("text", W, '"input_tokens":40', '"input_tokens":NaN')),
    "json.huge_number": _g(("text", W, '"input_tokens":40', '"input_tokens":' + "9" * 70)),
    "json.depth": _g(("wrap", W, '"w0"', 5000)),
    "jsonl.line_too_long": _g(("pad", W, 1, 64 * 1024 * 1024)),
    "json.file_too_large": _g(("pad", M, 0, 256 * 1024 * 1024)),
    "artifact.not_regular": _g(("fifo", O)),
    "artifact.symlink": _g(("symlink", M)),
    "artifact.unreadable": _g(("chmod", O, 0)),
    "enum.unknown": _g(("set", W, 1, "request.finish_reasons[0]", 99)),
    "id.invalid": _g(("set", W, 1, "request.sample_ids[0]", "s\u0007")),
    "manifest.trace_id": _g(("del", M, 0, "trace_id")),
    "trace.no_requests": _g(("drop", W, 1)),
    # measured outcomes
    "outcome.missing_reason": _g(("del", O, 1, "request.first_token_ns")),
    "outcome.completion_order": _g(("set", O, 2, "group.completed_ns", "8000000")),
    "outcome.samples": _g(("set", O, 1, "request.samples[2]",
                           {"sample_id": "ghost", "first_token_ns": "5000000", "completion_ns": "6000000"})),
    "outcome.cached_tokens": _a(("set", O, 2, "request.cached_tokens", 33)),
    "outcome.batch_boundary": _b(("set", O, 4, "request.submit_ns", "9500000")),
    # lineage and bounds
    "group.request_mismatch": _g(("append", W, {"rollout_batch": {
        "rollout_batch_id": "b1", "group_ids": [], "readiness_rule": "BATCH_READINESS_RULE_ALL_GROUPS",
        "engine_ids": ["e0"]}}), ("set", W, 1, "request.rollout_batch_id", "b1")),
    "bound.model_len": _g(("set", M, 0, "engines[0].max_model_len", 44)),
    "bound.max_output_tokens": _g(("set", W, 1, "request.max_output_tokens", 4)),
    "bound.tokens": _g(("del", M, 0, "engines[0].max_model_len"), ("set", W, 1, "request.output_tokens[1]", 4000000000)),
    "bound.count": _g(("set", W, 1, "request.num_samples", 5000)),
    "bound.window": _g(("set", M, 0, "window.duration_ns", str(31 * 86400 * 10**9))),
    "bound.engine_capacity": _g(("set", M, 0, "engines[0].num_kv_blocks", 1)),
}

_PATH = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [int(i) if i else k for k, i in _PATH.findall(path)]


def _apply(obj: Any, path: str, op: str, value: Any = None) -> None:
    steps = _steps(path)
    node = obj
    for s in steps[:-1]:
        node = node[s]
    last = steps[-1]
    if op == "set":
        if isinstance(last, int) and last == len(node):
            node.append(value)
        else:
            node[last] = value
    elif op == "del":
        del node[last]
    elif op == "rename":
        items = list(node.items())
        node.clear()
        node.update((value if k == last else k, v) for k, v in items)


def _line(rec: dict) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n"


def materialize(example: Example, out: Path) -> Path:
    """Write the base trace of ``example`` to the new directory ``out``, apply its edits, return ``out``."""
    out.mkdir(parents=True)
    workload, outcomes = copy.deepcopy(BASES[example.base])
    files: dict[str, list[dict]] = {"workload": workload, "outcomes": outcomes}
    enc = example.encoding
    later = [e for e in example.edits if e[1] == MANIFEST_FILE]
    # record edits on the JSON objects first (JSONL), then the byte-level ones
    for e in example.edits:
        if e[1] == MANIFEST_FILE or e[0] in _BYTE_OPS or e[0] in _POST_OPS or e[0] in _ROW_OPS:
            continue
        recs = files[e[1].split(".")[0]]
        if e[0] in ("set", "del", "rename"):
            _apply(recs[e[2] - 1], e[3], e[0], e[4] if len(e) > 4 else None)
        elif e[0] == "append":
            recs.append(copy.deepcopy(e[2]))
        elif e[0] == "dup":
            recs.append(copy.deepcopy(recs[e[2] - 1]))
        elif e[0] == "drop":
            del recs[e[2] - 1]
        else:
            raise ValueError(f"unknown edit {e[0]!r}")
    for kind, cls in (("workload", WorkloadRecord), ("outcomes", OutcomeRecord)):
        p = out / f"{kind}.{enc}"
        if enc == "jsonl":
            p.write_text("".join(_line(r) for r in files[kind]))
        elif enc == "arrow":
            _write_arrow(p, cls, files[kind], [e for e in example.edits if e[0] in _ROW_OPS and e[1] == p.name])
        else:
            frames = [json_profile.parse_dict(r, cls).SerializeToString() for r in files[kind]]
            p.write_bytes(b"".join(encode_varint(len(f)) + f for f in frames))
    man = copy.deepcopy(_MANIFEST)
    man["artifacts"] = []
    for kind, k in (("workload", "ARTIFACT_KIND_WORKLOAD"), ("outcomes", "ARTIFACT_KIND_OUTCOMES")):
        sha, size = sha256_file(out / f"{kind}.{enc}")
        man["artifacts"].append({"kind": k, "path": f"{kind}.{enc}", "encoding": f"ENCODING_{enc.upper()}",
                                 "sha256": sha, "record_count": str(len(files[kind])), "size_bytes": str(size)})
    byte_edits = [e for e in example.edits if e[1] != MANIFEST_FILE and e[0] in _BYTE_OPS]
    for e in byte_edits:
        p = out / e[1]
        if e[0] == "text":
            p.write_bytes(p.read_bytes().replace(e[2].encode(), e[3].encode(), 1))
        elif e[0] == "bytes":
            p.write_bytes(p.read_bytes() + bytes.fromhex(e[2]))
        elif e[0] == "cut":
            p.write_bytes(p.read_bytes()[:-e[2]])
        elif e[0] == "touch":
            p.write_bytes(b"")
        elif e[0] == "foreign":  # an Arrow IPC file of another schema
            from unirl_replay.contract import columnar

            pa = columnar.require_pyarrow()
            with pa.ipc.new_file(str(p), pa.schema([("x", pa.int64())])) as w:
                w.write_table(pa.table({"x": [1, 2]}))
        elif e[0] == "wrap":
            p.write_bytes(p.read_bytes().replace(e[2].encode(), b"[" * e[3] + e[2].encode() + b"]" * e[3], 1))
        elif e[0] == "pad":
            lines = p.read_bytes().split(b"\n")
            lines[e[2] - 1] += b" " * e[3]
            p.write_bytes(b"\n".join(lines))
    if example.redigest:
        for a in man["artifacts"]:
            p = out / a["path"]
            if p.exists():
                a["sha256"], size = sha256_file(p)
                a["size_bytes"] = str(size)
    for e in later:
        if e[0] in ("set", "del", "rename"):
            _apply(man, e[3], e[0], e[4] if len(e) > 4 else None)
    (out / MANIFEST_FILE).write_text(json.dumps(man, indent=2, ensure_ascii=False) + "\n")
    for e in [*byte_edits, *later]:
        if e[0] == "rm":
            (out / e[1]).unlink()
    for e in example.edits:
        if e[0] not in _POST_OPS and not (e[1] == MANIFEST_FILE and e[0] == "pad"):
            continue
        p = out / e[1]
        if e[0] == "pad":  # the manifest: whitespace after the JSON document
            with open(p, "ab") as f:
                f.write(b" " * e[3])
        elif e[0] == "fifo":
            p.unlink()
            os.mkfifo(p)
        elif e[0] == "symlink":
            target = p.with_name(p.name + ".target")
            p.rename(target)
            p.symlink_to(target.name)
        elif e[0] == "chmod":
            p.chmod(e[2])
    return out


_BYTE_OPS = ("text", "bytes", "cut", "rm", "touch", "wrap", "pad", "foreign")
_ROW_OPS = ("row_set",)  # arrow: set a value in a row (after the JSON record became an Arrow row)


def _write_arrow(p: Path, cls, records: list[dict], row_edits: list[tuple]) -> None:
    """The JSON records as an Arrow IPC file: each oneof member of a record parsed on its own (so a
    record may carry two, which no message can), then the row edits."""
    from unirl_replay.contract import columnar

    pa = columnar.require_pyarrow()
    rows = []
    for r in records:
        row = {}
        for member, value in r.items():
            msg = json_profile.parse_dict({member: value}, cls)
            row[member] = columnar.to_row(getattr(msg, member))
        rows.append(row)
    for _, _, line, path, value in row_edits:
        node = rows[line - 1]
        *head, last = path.split(".")
        for k in head:
            node = node[k]
        node[last] = value
    schema = columnar.arrow_schema(cls.DESCRIPTOR)
    with pa.ipc.new_file(str(p), schema) as w:
        w.write_table(pa.Table.from_pylist(rows, schema=schema))
_POST_OPS = ("fifo", "symlink", "chmod")
