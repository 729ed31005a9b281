"""The gate's fast pass (contract/validate/fast.py) never says CLEAN where validate's row rules
report an error, and `unirl-replay convert` answers the same with it on and forced off.

For each trace below, in binpb and arrow (the encodings the pass reads; JSONL always takes the
row rules): CLEAN implies ``check_trace(dir, outcomes=False)`` is VALID. The traces: every
rule's minimal violating example (contract/validate/examples.py, re-encoded), every broken
trace of test_validate, shuffled valid and broken traces (hypothesis), the mutation fuzzer's
mutants of the bundled and conformance traces, random workloads. And the pass is really taken:
valid traces are CLEAN.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzlib
from test_validate import CASES
from tracebuild import agentic_trace, grpo_trace
from unirl_replay.cli.main import main as cli_main
from unirl_replay.contract import gate as gate_mod
from unirl_replay.contract.validate import RULES, check_trace
from unirl_replay.contract.validate import fast as fast_mod
from unirl_replay.contract.validate.examples import BASES, EXAMPLES, Example, materialize
from unirl_replay.v1.report_pb2 import TraceCheck

pytest.importorskip("pyarrow")
ENCODINGS = ("binpb", "arrow")
VALID = TraceCheck.STATUS_VALID


def fast(d: Path) -> bool:
    return gate_mod._fast(d)[0]


def sound(d: Path) -> bool:
    """The pass's answer, asserting CLEAN => the row rules report no error."""
    clean = fast(d)
    if clean:
        res = check_trace(d, outcomes=False)
        assert res.status == VALID, [(v.rule, v.message) for v in res.violations]
    return clean


def cli_convert(d: Path, out_dir: Path, capsys, on: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(gate_mod, "FAST", on)
    out = out_dir / "in.jsonl"
    rc = cli_main(["convert", str(d), "--out", str(out), "--allow-unmodelled", "engine_client.inflight_limit"])
    cap = capsys.readouterr()
    files = {p.name: p.read_bytes() for p in sorted(out_dir.glob("*"))} if out_dir.exists() else {}
    return rc, cap.out.replace(str(out_dir), "OUT"), cap.err.replace(str(out_dir), "OUT"), files


def same_cli(d: Path, tmp: Path, capsys, monkeypatch) -> tuple:
    on = cli_convert(d, tmp / "on", capsys, True, monkeypatch)
    off = cli_convert(d, tmp / "off", capsys, False, monkeypatch)
    assert on == off
    return on


def test_the_pass_applies_to_this_contract():
    assert fast_mod._PLAN_MATCHES  # Request's / Trajectory's id and enum fields are the covered ones


# every rule of the registry when the pass was written (each one covered: the pass implies its "no
# error" condition, runs the checker's own code for it, or declines). A new rule makes this fail:
# teach contract/validate/fast.py the rule (or make it decline), then add it here.
KNOWN_RULES = {
    "arrival.dependencies", "arrival.kind_missing", "arrival.mixed_missing", "arrow.corrupt", "arrow.decode",
    "arrow.oneof", "arrow.schema", "artifact.digest", "artifact.missing", "artifact.not_regular",
    "artifact.record_count", "artifact.size", "artifact.symlink", "artifact.unreadable", "batch.membership",
    "batch.required_groups", "binpb.decode", "binpb.frame", "binpb.truncated", "binpb.unknown_fields",
    "bound.count", "bound.engine_capacity", "bound.max_output_tokens", "bound.model_len", "bound.tokens",
    "bound.window", "cache_warmup.cold_manifest", "compat.newer_revision", "dependency.cross_trajectory", "dependency.cycle",
    "dependency.delay_absence", "dependency.duplicate", "dependency.no_trajectory", "dependency.unresolved",
    "enum.unknown", "enum.unspecified", "fanout.count", "request.input_tokens", "trajectory.engine", "group.members", "group.request_mismatch",
    "group.singleton", "group.size", "id.duplicate", "id.empty", "id.invalid", "json.camel_case_key", "json.depth",
    "json.duplicate_key", "json.enum_number", "json.file_too_large", "json.huge_number", "json.int32_string",
    "json.int64_form", "json.int64_number", "json.nan", "json.null", "json.parse", "json.profile",
    "jsonl.empty_line", "jsonl.line_too_long", "jsonl.truncated", "manifest.artifacts", "manifest.conditions",
    "manifest.created_at", "manifest.engine", "manifest.probe", "manifest.schema_version", "manifest.trace_id",
    "manifest.window", "outcome.completion_order", "outcome.missing_reason", "outcome.samples",
    "outcome.unmatched", "prefix.block_size", "prefix.count", "prefix.missing", "record.empty", "reference.batch",
    "reference.engine", "reference.group", "reference.request", "reference.slot_pool", "reference.trajectory",
    "slot_pool.slots", "time.order", "trace.no_manifest", "trace.no_requests", "trace.not_a_trace",
    "trace.partial_files", "trajectory.requests", "turn.dependency_order", "turn.index", "turn.order",
    "units.negative", "units.outside_window", "units.suspect_scale", "units.suspect_small",
    # issue 14 (RolloutBatch.after_batch): pass 1 of the batch records (record1) and _batch_boundaries, run by
    # the pass; outcome.batch_boundary reads the outcomes, which the pass never checks
    "batch.boundary_empty", "batch.boundary_unknown", "batch.boundary_self", "batch.boundary_cycle",
    "outcome.batch_boundary",
    # s10-attack: a manifest rule, run by the pass through the checker's own manifest()
    "manifest.capture_overhead",
    # s15-attack2: a manifest rule as well (workload_name), run by the pass through the checker's manifest()
    "manifest.workload_name",
    # session 15: a manifest rule (a probe's artifact file), run by the pass through the checker's manifest()
    "manifest.probe_artifact",
    # s17-val: pass 1 of a CacheWarmup record (record1), run by the pass; prefix.block_size now also covers
    # hashes with block size 0 (the pass declines on a request holding such hashes)
    "cache_warmup.prefix",
    # s18-contract: pass 1 of an EngineClient record (record1), run by the pass
    "engine_client.limit",
    # s18-contract: pass 1 of a Trajectory record (record1), run by the pass
    "trajectory.start_order",
    # s18-contract: a manifest rule, run by the pass through the checker's manifest()
    "manifest.completeness",
    # s18-contract: pass 1 of a Group record (record1), run by the pass
    "group.resumed_from",
    # s19-rules: a request's sample ids distinct (the pass checks the sample ids it holds per request)
    "fanout.sample_ids",
    # s19-rules: an outcome rule (a request outcome's cached_tokens), which the pass never checks
    "outcome.cached_tokens",
    # s19-rules: the pass notes each pool slot's start order and runs the checker's own _pool_starts
    "slot_pool.start_order",
    # s19-rules: the pass notes each pool trajectory's engine and runs the checker's own _pool_engines
    "slot_pool.engines",
    # s19-rules: the pass notes each (batch, engine) pair of the requests and runs the checker's own _batch_engines
    "batch.engines",
}


def test_every_rule_is_known_to_the_pass():
    assert set(RULES) == KNOWN_RULES, (f"new rules {sorted(set(RULES) - KNOWN_RULES)}: teach "
                                       "contract/validate/fast.py them (or make it decline)")


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("builder", [grpo_trace, agentic_trace])
def test_valid_traces_take_the_fast_path(builder, encoding, tmp_path):
    d = builder().write(tmp_path / "t", encoding)
    assert sound(d)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("pooled", [True, False])
def test_trajectory_without_engine_is_valid(pooled, encoding, tmp_path, capsys, monkeypatch):
    """Trajectory.engine_id is optional ("Engine all its requests go to (when set ...)"): a Trajectory
    without one, holding a pool slot or not, is valid on both paths (it was reference.engine: ''), and
    converts the same with the fast pass on and off."""
    t = agentic_trace()
    if not pooled:
        t.workload = [r for r in t.workload if r.WhichOneof("record") != "slot_pool"]
    for k in range(2):
        tr = t.trajectory(f"traj-{k}")
        tr.engine_id = ""
        if not pooled:
            tr.slot_pool_id = ""
            tr.ClearField("start_order")
    d = t.write(tmp_path / "t", encoding)
    res = check_trace(d)
    assert res.status == VALID, [(v.rule, v.message) for v in res.violations]
    assert sound(d)
    assert same_cli(d, tmp_path, capsys, monkeypatch)[0] == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("base", list(BASES))
def test_example_bases_take_the_fast_path(base, encoding, tmp_path, capsys, monkeypatch):
    d = materialize(Example(base, (), encoding=encoding), tmp_path / "t")
    assert sound(d)
    assert same_cli(d, tmp_path, capsys, monkeypatch)[0] == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_bench_workload_takes_the_fast_path(encoding, tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_pipeline import write_trace

    d = tmp_path / "t"
    write_trace(d, 400, encoding)
    assert sound(d)
    rc, out, err, files = same_cli(d, tmp_path, capsys, monkeypatch)
    assert rc == 0 and files


@pytest.mark.parametrize("rule", list(EXAMPLES))
def test_every_rule_example(rule, tmp_path, capsys, monkeypatch):
    ex = EXAMPLES[rule]
    seen = 0
    for enc in dict.fromkeys((ex.encoding, *ENCODINGS)):
        try:
            d = materialize(dataclasses.replace(ex, encoding=enc), tmp_path / enc)
        except Exception:  # noqa: BLE001 - an edit of another encoding's bytes: that variant does not exist
            continue
        seen += 1
        clean = sound(d)
        rc, out, err, _ = same_cli(d, tmp_path / f"cli-{enc}", capsys, monkeypatch)
        if clean:
            assert rc == 0, err
    assert seen


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rule,record_id,builder,mutate", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_broken_traces(rule, record_id, builder, mutate, encoding, tmp_path):
    t = builder()
    mutate(t)
    try:
        d = t.write(tmp_path / "t", encoding)
    except Exception:  # noqa: BLE001 - a record the writer of this encoding refuses
        pytest.skip("not writable in this encoding")
    sound(d)


def test_broken_traces_through_the_cli(tmp_path, capsys, monkeypatch):
    for i, (_rule, _rid, builder, mutate) in enumerate(CASES):
        t = builder()
        mutate(t)
        try:
            d = t.write(tmp_path / f"t{i}", "binpb")
        except Exception:  # noqa: BLE001
            continue
        same_cli(d, tmp_path / f"c{i}", capsys, monkeypatch)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(case=st.sampled_from([None, *range(len(CASES))]), seed=st.integers(0, 2**32 - 1),
       builder=st.sampled_from([grpo_trace, agentic_trace]), encoding=st.sampled_from(ENCODINGS),
       size=st.integers(1, 6))
def test_shuffled_traces(case, seed, builder, encoding, size, tmp_path_factory):
    if case is None:
        t = builder(size) if builder is grpo_trace else builder()
    else:
        t = CASES[case][2]()
        CASES[case][3](t)
    random.Random(seed).shuffle(t.workload)
    try:
        d = t.write(tmp_path_factory.mktemp("t"), encoding)
    except Exception:  # noqa: BLE001
        return
    sound(d)


def test_fuzzer_mutants(tmp_path):
    """The fuzzer's mutations (tests/fuzzlib.py) of its seeds and their arrow copies."""
    rng = random.Random(17)
    pool = [s for s in fuzzlib.seeds(tmp_path / "w") if s.encoding == "binpb"]
    for s in list(pool):
        m, wl, oc = fuzzlib.load(s.dir)
        ad = tmp_path / "w" / "seeds" / f"{s.name}.arrow"
        fuzzlib.rewrite(ad, m, wl, oc, "arrow")
        pool.append(fuzzlib.Seed(s.name.replace(".binpb", ".arrow"), ad, "arrow"))
    taken = [sound(s.dir) for s in pool]
    assert sum(taken) >= len(pool) // 2, taken  # most valid seeds take the fast path
    clean = refused = 0
    for i in range(160):
        s = rng.choice(pool)
        d = tmp_path / f"m{i}"
        for _ in range(50):
            cls, name, breaks, fn = rng.choice(fuzzlib.MUTATIONS)
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(s.dir, d, symlinks=True)
            try:
                fn(d, s, rng)
                break
            except fuzzlib.NotApplicable:
                continue
            except Exception:  # noqa: BLE001 - a mutation that cannot edit this encoding
                continue
        else:
            continue
        if sound(d):
            clean += 1
        else:
            refused += 1
        shutil.rmtree(d, ignore_errors=True)
    assert clean and refused  # both answers occurred


# random workloads (test_convert_fast_write's generator: trajectories, joins, lanes, warm-ups,
# two engines, non-ASCII ids), with random edits of request fields the rules read
def _edits():
    from unirl_replay.v1 import common_pb2 as c

    def dep_field(name, value):
        def f(r, rnd):
            if r.dependencies:
                setattr(rnd.choice(r.dependencies), name, value)
        return f

    def set_(name, value):
        return lambda r, rnd: setattr(r, name, value)

    return [
        set_("num_samples", 0), set_("num_samples", 2), set_("engine_id", "nope"), set_("engine_id", ""),
        set_("input_tokens", 1 << 25), set_("input_tokens", 9999), set_("max_output_tokens", 0),
        set_("request_id", "bad\x07id"), set_("request_id", "x" * 1100), set_("worker_id", "w\x85"),
        set_("trajectory_id", ""), set_("trajectory_id", "elsewhere"), set_("group_id", "g-unknown"),
        set_("rollout_batch_id", "b-unknown"), set_("policy_version", -3),
        lambda r, rnd: r.ClearField("turn_index"),
        lambda r, rnd: setattr(r, "turn_index", r.turn_index + 7),
        lambda r, rnd: r.ClearField("arrival"),
        lambda r, rnd: setattr(r.arrival, "observed_offset_ns", -1),
        lambda r, rnd: setattr(r.arrival, "observed_offset_ns", 10**19 // 2),
        lambda r, rnd: r.arrival.after_dependencies.SetInParent(),
        lambda r, rnd: r.finish_reasons.append(c.FINISH_REASON_STOP),
        lambda r, rnd: r.finish_reasons.__setitem__(0, 0) if r.finish_reasons else None,
        lambda r, rnd: r.finish_reasons.__setitem__(0, 77) if r.finish_reasons else None,
        lambda r, rnd: r.sample_ids.append("extra"),
        lambda r, rnd: r.output_tokens.append(1 << 25),
        lambda r, rnd: r.prefix.block_hashes.append(5),
        lambda r, rnd: setattr(r.prefix, "block_size_tokens", 8),
        lambda r, rnd: r.prefix.ClearField("block_size_tokens"),
        dep_field("predecessor_request_id", "ghost"), dep_field("trigger", 0), dep_field("relation", 55),
        dep_field("delay_absence", 1), dep_field("delay_absence", 99), dep_field("external_delay_ns", -5),
        lambda r, rnd: r.ClearField("dependencies"),
        lambda r, rnd: r.dependencies.add().CopyFrom(r.dependencies[0]) if r.dependencies else None,
        lambda r, rnd: setattr(r.dependencies[0], "predecessor_request_id", r.request_id) if r.dependencies else None,
    ]


EDITS = _edits()


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(seed=st.integers(0, 10**6), edits=st.lists(st.tuples(st.integers(0, len(EDITS) - 1), st.integers(0, 10**6)),
                                                  max_size=3),
       encoding=st.sampled_from(ENCODINGS))
def test_random_workloads(seed, edits, encoding, tmp_path_factory):
    from test_convert_fast_write import random_workload
    from tracebuild import TraceParts

    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=seed % 4 == 0 and seed % 3 != 2)
    rnd = random.Random(seed)
    for k, s in edits:
        r = random.Random(s).choice(ix.requests)
        EDITS[k](r, rnd)
    t = TraceParts(mf)
    for m in [*ix.requests, *ix.trajectories.values(), *ix.slot_pools.values(), *ix.warmups]:
        t.add(m)
    try:
        d = t.write(tmp_path_factory.mktemp("t"), encoding)
    except Exception:  # noqa: BLE001 - a record this encoding's writer refuses
        return
    clean = sound(d)
    if not edits and check_trace(d, outcomes=False).status == VALID:
        assert clean  # an unedited valid workload takes the fast path


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_hashes_with_block_size_0_decline(encoding, tmp_path):
    """A request with prefix hashes and block size 0 (prefix.block_size, an error) is never CLEAN; the same
    trace with the request's prefix removed (prefix.missing, a warning) still is."""
    t = grpo_trace()
    t.request("req-0").prefix.block_size_tokens = 0
    assert not sound(t.write(tmp_path / "hashes", encoding))
    t.request("req-0").ClearField("prefix")
    assert sound(t.write(tmp_path / "none", encoding))
