"""The rule registry: every rule ``validate`` checks, its group, severity and what it checks.

``RULES`` (rule id -> one-line summary) is the public list; ``RULE_GROUP`` and ``RULE_SEVERITY``
give each rule's group (the module of this package that checks it) and default severity. Every
rule has a test in ``tests/test_validate.py`` that triggers it with a broken trace.

Groups: ``framing`` (the container, artifacts and record framing: reported through
``contract.trace_io``), ``manifest``, ``requests`` (per-request shape, prefix hashes, arrivals,
units), ``dependencies`` (predecessors, delays, cycles), ``lineage`` (trajectories, GRPO groups,
rollout batches, slot pools), ``outcomes`` (measured times) and ``bounds`` (values beyond what the
engine can run or any real trace holds, each stating its bound).
"""

from __future__ import annotations

from unirl_replay.v1.report_pb2 import Violation

ERROR = Violation.SEVERITY_ERROR
WARNING = Violation.SEVERITY_WARNING

#: Times farther than this factor times the window duration are flagged as a likely unit error.
SUSPECT_SCALE = 100
#: With at least 2 observed arrivals all inside window / SUSPECT_SMALL, the offsets look like s or ms.
SUSPECT_SMALL = 100_000

# Bounds (rule group ``bounds``): values beyond these would make the simulator run away (allocate
# per token, loop per sample) long before they could be real; each is a violation naming the bound.
#: Largest token count of one prompt or one sample when the engine declares no max_model_len.
MAX_TOKENS = 1 << 24
#: Largest num_samples of one request (vLLM ``n``).
MAX_SAMPLES = 4096
#: Most dependencies of one request.
MAX_DEPENDENCIES = 4096
#: Longest capture window (30 days); with SUSPECT_SCALE it bounds every time of the trace.
MAX_WINDOW_NS = 30 * 24 * 3600 * 10**9
#: Largest step time of a reference probe point (1 hour): a decode step or an isolated prefill of the probe.
MAX_PROBE_MS = 3_600_000.0
#: Largest 1-minute load average of RunConditions (a host with a million runnable threads is no measurement).
MAX_LOADAVG = 1e6

#: rule id -> what it checks. Every rule has a test in tests/test_validate.py.
RULES: dict[str, str] = {
    # container (reported by trace_io; status INCOMPLETE for the first group)
    "trace.no_manifest": "manifest.json missing: never finalized (INCOMPLETE)",
    "trace.not_a_trace": "a directory with no manifest, no workload / outcomes file and no partial files: not a trace",
    "trace.partial_files": "*.partial leftovers of an unfinished writer (INCOMPLETE)",
    "artifact.missing": "an artifact listed in the manifest is missing (INCOMPLETE)",
    "artifact.size": "artifact size differs from the manifest (INCOMPLETE)",
    "artifact.digest": "artifact sha256 differs from the manifest (INCOMPLETE)",
    "artifact.record_count": "record count differs from the manifest (INCOMPLETE)",
    "jsonl.truncated": "last JSONL line has no newline (INCOMPLETE)",
    "binpb.truncated": "binpb stream ends inside a frame (INCOMPLETE)",
    "manifest.schema_version": "schema_version is not unirl_replay.v1",
    "manifest.artifacts": "manifest must list exactly one workload and one outcomes artifact, same encoding",
    "json.parse": "a line / file is not JSON",
    "json.profile": "JSON that is not a valid message (unknown key, wrong type, unknown enum name)",
    "jsonl.empty_line": "empty line in a JSONL stream",
    "binpb.frame": "corrupt length prefix",
    "binpb.decode": "frame is not a valid message",
    "arrow.corrupt": "an arrow record file that is not a readable, valid Arrow IPC file (another format, corrupt "
                     "offsets or UTF-8, a broken footer, a compressed record batch)",
    "arrow.schema": "an arrow record file whose schema is neither the one derived from the record message nor a "
                    "superset of it (another message, another tool; a known field missing, renamed or retyped)",
    "arrow.oneof": "an arrow row with two members of one oneof set (two record kinds, two arrival kinds)",
    "arrow.decode": "an arrow row no message can hold (a null item in a list)",
    "binpb.unknown_fields": "binpb frames (or an arrow file's schema) carry fields this reader does not know, but the "
                            "manifest's contract_revision is not newer than the reader's (set contract_revision in "
                            "the writer)",
    # off-profile JSON (json_profile.OFF_PROFILE_FORMS): accepted by the reader, never written by the profile
    "json.camel_case_key": "a lowerCamelCase key instead of the proto field name (warning; an error under --strict)",
    "json.enum_number": "an enum written as a number, or as a numeric string (\"1\"), instead of its name (warning; an "
                         "error under --strict)",
    "json.int32_string": "a 32-bit integer written as a string (warning; an error under --strict)",
    "json.int64_number": "a 64-bit integer written as a JSON number, not a decimal string (warning; an error under "
                         "--strict)",
    "json.int64_form": "a 64-bit decimal string with leading zeros, -0, + or spaces (warning; an error under --strict)",
    "json.null": "null instead of an absent key (warning; an error under --strict)",
    "compat.newer_revision": "the trace comes from a newer v1 revision and carries fields this reader skipped "
                             "(warning; an error under --strict)",
    "json.duplicate_key": "a JSON object with the same key twice, or one field under its proto name and its "
                          "lowerCamelCase JSON name (rejected, never last-one-wins)",
    "json.nan": "NaN / Infinity tokens, or a number overflowing to infinity",
    "json.huge_number": "a number literal longer than 64 characters",
    "json.depth": "JSON nested beyond the interpreter's recursion limit",
    "jsonl.line_too_long": "a JSONL line longer than trace_io.MAX_LINE_BYTES (64 MiB)",
    "json.file_too_large": "a single-message JSON file larger than trace_io.MAX_JSON_FILE_BYTES (256 MiB)",
    "artifact.not_regular": "a trace file that is a FIFO, device or directory",
    "artifact.unreadable": "a trace file that cannot be read (permissions, I/O error)",
    "artifact.symlink": "a trace file that is a symbolic link",
    "enum.unknown": "an enum number that is no value of its enum in v1 (rejected by v1 readers)",
    "id.invalid": "an id with control characters (or Unicode bidirectional controls) or longer than 1024 characters",
    # manifest
    "manifest.window": "capture window missing or duration_ns <= 0",
    "manifest.engine": "engine without engine_id or with block_size_tokens 0",
    "trace.no_requests": "a trace with 0 requests (nothing to replay: e.g. a capture whose records never joined)",
    "manifest.trace_id": "manifest without trace_id",
    "manifest.workload_name": "workload_name holding a control character (or a Unicode bidirectional control) or longer than 1024 characters (compare "
                              "tells calibration and holdout workloads apart by it; reports and tables print it)",
    "manifest.created_at": "created_at present but not an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SS[.fff]Z or +00:00)",
    "manifest.conditions": "RunConditions (the trace's or a probe's) with a load average not finite, < 0 or above "
                           f"{MAX_LOADAVG:.0e}, a steal / busy percentage outside 0-100, a negative time or CPU time, "
                           "or a cpu_signature whose microcode, flags digest or ISA flags hold a control character or "
                           "more than 1024 characters, with an empty or repeated ISA flag, more than 1024 flags, or an "
                           "ISA flag not among isa_flags_checked (a profile's provenance.conditions meet the same rule)",
    "manifest.capture_overhead": "capture_overhead with an overhead_ratio not finite or below -1 (instrumented / plain "
                                 "- 1 of two wall times), or a negative instrumented / plain wall time",
    "manifest.completeness": "completeness (CaptureCompleteness) saying complete while listing lost records, or "
                             "incomplete while listing none, or a LostRecords entry without kind or with count 0 "
                             "(complete is true when nothing was lost; what was lost is said in lost)",
    "manifest.probe_artifact": "a reference probe whose artifact_path (a path inside the trace directory) names no "
                               "regular file there, or one reached through a symbolic link (its points are the manifest's, the raw requests they were taken "
                               "from are not in the trace: copied without its probes/ directory?), or a file that "
                               "is not the entry's ReferenceProbeArtifact (does not parse as one, another schema, "
                               "another engine or side, a time that is not finite and >= 0: \"NaN\" or "
                               "\"Infinity\" in a point's step times, probe_wall_s, window_offset_s; a "
                               "reference-probe/1 artifact, written before the message, is accepted as JSON) (warning)",
    "manifest.probe": "a reference probe (TraceManifest.probes) of an unknown engine, `when` not before / after, a "
                      "relative artifact_path leaving the trace directory, holding a control character or naming one of the "
                      "trace's own files (manifest, workload / outcomes streams, *.partial), or a point with phase not decode / prefill, "
                      f"no batch / context / prefill tokens for its phase, a median not finite, <= 0 or above "
                      f"{MAX_PROBE_MS:.0f} ms, quartiles not finite and around the median, sizes no engine runs "
                      f"(a context or prefill row over max_model_len, batch x context over {MAX_TOKENS}), per-repeat values (repeat_step_ms, "
                      "repeat_pass_tokens, repeat_pass_rows) of unequal counts, on a point that is no batched prefill point or "
                      "whose batch_size / prefill_tokens are not their median-low, a step time as for the median, or a "
                      "pass without rows or with fewer tokens than rows, a median outside its repeats' step times, a median of 0 "
                      "repeats or repeats other than the count of repeat_step_ms, two entries of one point (same phase "
                      "and sizes) in a probe's points (or contended_points), or two probes of one engine on one side "
                      "of the window",
    # records
    "record.empty": "a WorkloadRecord / OutcomeRecord with no member of its oneof set",
    "id.empty": "a record without its id",
    "id.duplicate": "an id used twice by records of one kind (per artifact)",
    "enum.unspecified": "an enum left at its _UNSPECIFIED value",
    "reference.engine": "engine_id not among the manifest's engines",
    "reference.trajectory": "trajectory_id names no Trajectory record",
    "reference.group": "group_id names no Group record",
    "reference.batch": "rollout_batch_id names no RolloutBatch record",
    "reference.slot_pool": "slot_pool_id names no SlotPool record",
    "reference.request": "a Trajectory / Group lists a request id that no Request has",
    "fanout.count": "len(sample_ids) == num_samples == len(output_tokens) == len(finish_reasons), num_samples >= 1",
    "fanout.sample_ids": "a request whose sample_ids are not distinct (one id per sample: per-sample timings "
                         "(SampleTiming.sample_id) and UniRL's samples are keyed by it; a repeated id names two "
                         "samples as one)",
    "request.input_tokens": "a request with 0 input tokens (Request.input_tokens is len(prompt_token_ids): vLLM takes no "
                            "empty prompt; convert refused such a trace under this rule while validate called it valid)",
    "prefix.count": "len(block_hashes) == ceil(input_tokens / block_size_tokens)",
    "prefix.block_size": "prefix block size equals the engine's block_size_tokens (block hashes with "
                         "block_size_tokens 0 included: convert / replay refused them as prefix.block_size_mismatch "
                         "while validate called the trace valid)",
    "prefix.missing": "request with input tokens but no prefix hashes (warning)",
    "cache_warmup.cold_manifest": "a CacheWarmup record in a trace whose manifest cache_state is not "
                                  "CACHE_STATE_KIND_WARM_DECLARED (warm-ups are declared-resident prefixes; COLD is "
                                  "an empty cache)",
    "cache_warmup.prefix": "a CacheWarmup record with 0 input tokens or without prefix block hashes (no prefix, "
                           "or block size 0 and no hashes): a warm-up is a prefix declared resident by its block "
                           "hashes, without them it declares nothing the replay can load (convert / replay refused "
                           "it as prefix.block_size_mismatch while validate called the trace valid)",
    "arrival.kind_missing": "request without an arrival",
    "arrival.mixed_missing": "request without an arrival among requests with observed arrivals (never defaulted)",
    "arrival.dependencies": "arrival.after_dependencies set exactly when dependencies is non-empty",
    "dependency.unresolved": "predecessor_request_id names no request",
    "dependency.cross_trajectory": "dependency leaves the request's trajectory",
    "dependency.no_trajectory": "request with dependencies but no trajectory",
    "dependency.duplicate": "the same predecessor listed twice",
    "dependency.delay_absence": "external_delay_ns present XOR delay_absence set",
    "dependency.cycle": "dependencies form a cycle",
    "turn.index": "turn_index present exactly when trajectory_id is set",
    "turn.order": "a trajectory's request_ids are its requests with turn_index 0, 1, 2, ... in order",
    "turn.dependency_order": "a dependency points to the same or a later turn",
    "trajectory.requests": "requests naming a trajectory that its request_ids do not list",
    "group.members": "a group member is not a request / trajectory (by unit) or belongs to another group",
    "group.size": "group member count (samples or trajectories) differs from expected_size",
    "group.singleton": "group of size 1 while expected_size > 1: group id set per trajectory? (warning)",
    "group.resumed_from": "a group whose resumed_from_rollout_batch_id is present but empty or names the group's "
                          "own rollout batch (a resumed group names the EARLIER batch it resumed from; not resumed: "
                          "leave the field out)",
    "batch.membership": "every group in exactly one batch, and in the batch it names",
    "batch.required_groups": "FIRST_N_GROUPS: 1 <= required_groups <= len(group_ids); ALL_GROUPS: 0 or len",
    "batch.boundary_empty": "after_batch present with an empty previous_rollout_batch_id (a boundary names the "
                            "batch it waited for; no boundary: leave after_batch out)",
    "batch.boundary_unknown": "after_batch.previous_rollout_batch_id names no RolloutBatch record of the trace",
    "batch.boundary_self": "after_batch.previous_rollout_batch_id names the batch itself",
    "batch.boundary_cycle": "the after_batch links of rollout batches form a cycle (a batch that waits, through them, "
                            "for itself)",
    "batch.engines": "a rollout batch whose engine_ids is non-empty but leaves out an engine one of its requests "
                     "(rollout_batch_id) ran on (RolloutBatch.engine_ids: the engines its requests went to; empty: "
                     "not recorded)",
    "slot_pool.slots": "a slot pool with 0 trajectory slots",
    "slot_pool.start_order": "two trajectories holding slots of one pool with the same start_order (a pool grants "
                             "its slots in start order, one trajectory at each position; replay refuses it as "
                             "slot_pool.start_order rather than pick an order)",
    "slot_pool.engines": "a trajectory whose engine_id (when set) is not among the engine_ids of the slot pool it "
                         "holds a slot of, when that pool lists any (SlotPool.engine_ids: the engines whose "
                         "trajectories draw from it; replay refuses it as slot_pool.engines)",
    "trajectory.start_order": "a trajectory holding a slot of a pool (slot_pool_id set) without start_order (slots "
                              "are granted in start order; convert refused it as trajectory.start_order while "
                              "validate called the trace valid)",
    "engine_client.limit": "an EngineClient whose inflight_request_limit is present and 0 (no model request could "
                           "ever be in flight; absent means unlimited; convert --allow-unmodelled "
                           "engine_client.inflight_limit.as_lanes made it 0 lanes, a traceback in upstream, while "
                           "validate called the trace valid)",
    "units.negative": "a time or delay below 0 (a dependency's external_delay_ns, a batch boundary's driver_gap_ns "
                      "included)",
    "units.suspect_scale": f"a time beyond {SUSPECT_SCALE}x the window duration: wrong unit?",
    "units.outside_window": "an observed arrival after the window end (warning)",
    "units.suspect_small": f"all observed arrivals in the first 1/{SUSPECT_SMALL} of the window: seconds / ms? (warning)",
    "time.order": "submit <= queued <= scheduled <= first_token <= completion (and slot acquired <= released)",
    "outcome.unmatched": "an outcome record whose id matches no workload record of its kind",
    "outcome.missing_reason": "a request outcome missing submit / scheduled / first token / completion and no "
                              "unavailable_reason (queued_ns, the engine's own queue entry, is optional)",
    "outcome.completion_order": "a group completed before one of its requests, a batch ready before "
                                "the groups its readiness rule waits for, or a trajectory's slot acquired after its "
                                "first request's submit or released before its last request's completion",
    "outcome.samples": "per-sample timings for an unknown, repeated, missing or late sample, or a request whose "
                       "first_token_ns / completion_ns is not the earliest first token / the last completion of its "
                       "timed samples",
    "outcome.cached_tokens": "a request outcome whose cached_tokens (prompt tokens served from the prefix cache, "
                             "vLLM num_cached_tokens) exceeds its request's input_tokens (the cache serves at most "
                             "the prompt)",
    "outcome.batch_boundary": "a request of a rollout batch with after_batch submitted (submit_ns) before the "
                              "previous batch's measured ready_ns: the batch did not wait for it",
    "group.request_mismatch": "a request whose group_id / rollout_batch_id disagrees with the group or "
                              "trajectory that lists it, or that names a SAMPLES group which neither lists it nor "
                              "has a member waiting for it (an intermediate request of a multi-level lineage "
                              "reaches its group through its leaves' dependencies)",
    "trajectory.engine": "a request of a trajectory on another engine than the one its Trajectory record names "
                         "(Trajectory.engine_id: the engine all its requests go to; convert refused it as "
                         "trajectory.cross_engine while validate called the trace valid)",
    # bounds
    "bound.model_len": "input_tokens + output_tokens of a sample above the engine's max_model_len",
    "bound.max_output_tokens": "output_tokens of a sample above the request's max_output_tokens",
    "bound.tokens": f"a token count above {MAX_TOKENS} (engine without max_model_len)",
    "bound.count": f"num_samples above {MAX_SAMPLES} or more than {MAX_DEPENDENCIES} dependencies",
    "bound.window": f"capture window longer than {MAX_WINDOW_NS // (24 * 3600 * 10**9)} days",
    "bound.engine_capacity": "an engine whose KV cache (num_kv_blocks x block_size_tokens) cannot hold its "
                             "longest sequence, or whose batch budget is below its longest prompt with chunked prefill off",
}

GROUPS = ("framing", "manifest", "requests", "dependencies", "lineage", "outcomes", "bounds")
#: rule id prefixes (or whole ids) -> group; the first match in GROUPS order of specificity wins.
_GROUP_PREFIXES: dict[str, tuple[str, ...]] = {
    "framing": ('trace.', 'artifact.', 'jsonl.', 'binpb.', 'arrow.', 'json.', 'compat.', 'record.empty', 'id.',
                'enum.unspecified', 'enum.unknown'),
    "manifest": ('manifest.',),
    "dependencies": ('dependency.', 'turn.dependency_order'),
    "lineage": ('reference.trajectory', 'reference.group', 'reference.batch', 'reference.slot_pool', 'reference.request', 'turn.order', 'trajectory.', 'group.', 'batch.', 'slot_pool.', 'engine_client.'),
    "outcomes": ('time.order', 'outcome.'),
    "bounds": ('bound.',),
    "requests": ('reference.engine', 'fanout.', 'prefix.', 'arrival.', 'units.', 'turn.index', 'cache_warmup.',
                 'request.input_tokens'),
}


def _group_of(rule: str) -> str:
    best = ("", "")
    for group, prefixes in _GROUP_PREFIXES.items():
        for p in prefixes:
            if (rule == p or (p.endswith(".") and rule.startswith(p))) and len(p) > len(best[0]):
                best = (p, group)
    if not best[1]:
        raise AssertionError(f"rule {rule!r} belongs to no group")
    return best[1]


#: rule id -> group (module of this package that checks it)
RULE_GROUP: dict[str, str] = {r: _group_of(r) for r in RULES}
#: rule id -> default severity (warnings never make a trace invalid)
RULE_SEVERITY: dict[str, int] = {r: (WARNING if "(warning" in s else ERROR) for r, s in RULES.items()}
