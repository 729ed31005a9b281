"""Explicit, labelled opt-in for constraints upstream cannot express (``unmodelled=``).

UniRL's direct-vLLM driver serialises agentic requests with a client lock
(``EngineClient.inflight_request_limit = 1``) while several trajectory slots are active. Upstream
has no client in-flight limit separate from lanes: by default such a trace is rejected; with
``unmodelled=("engine_client.inflight_limit",)`` it is replayed WITHOUT the limit and the result
records the dropped constraint (field + note), and reports label it UNMODELLED.
"""

from __future__ import annotations

import pytest
from replay_build import FIXED, client, dep, index, manifest, ms, pool, record, req, traj

from unirl_replay.cli.main import main
from unirl_replay.replay.support import UNMODELLED_ALLOWED, check_supported
from unirl_replay.contract.errors import UnsupportedWorkloadError

RULE = "engine_client.inflight_limit"


def locked_two_slots():
    # two trajectories of two turns (5 ms tool wait), 2 slots, client limit 1 (the locked driver)
    return index(req("a0", traj="A", turn=0), req("a1", traj="A", turn=1, deps=[dep("a0", 5)]),
                 req("b0", traj="B", turn=0), req("b1", traj="B", turn=1, deps=[dep("b0", 5)]),
                 traj("A", ["a0", "a1"], pool="p", order=0), traj("B", ["b0", "b1"], pool="p", order=1),
                 pool("p", 2), client("e0", 1))


REJECTION = (
    "unsupported [engine_client.inflight_limit]: engine 'e0': the client allows 1 in-flight model requests "
    "but up to 2 can be in flight (lanes=2); upstream cannot limit in-flight requests separately from "
    "trajectory lanes (replay_concurrency is rejected with agentic_mooncake). To replay anyway WITHOUT the "
    "client limit, pass --allow-unmodelled engine_client.inflight_limit (replay_workload(..., unmodelled=("
    "'engine_client.inflight_limit',))): up to 2 requests then run concurrently, batch readiness is optimistic "
    "and the result records the dropped constraint (reports label it UNMODELLED) (records: e0)")


def test_default_rejects_and_names_the_opt_in():
    with pytest.raises(UnsupportedWorkloadError) as e:
        check_supported(locked_two_slots(), {"e0": manifest().engines[0]})
    assert str(e.value) == REJECTION and e.value.rule == RULE


def test_allow_list_is_explicit_and_justified():
    # the two bounds of the client limit: drop it (optimistic) or replay it as lanes = the limit (pessimistic);
    # a batch boundary upstream cannot hold, replayed open loop
    assert list(UNMODELLED_ALLOWED) == [RULE, RULE + ".as_lanes", "batch_boundary.open_loop"]
    assert all(len(why) > 40 for why in UNMODELLED_ALLOWED.values())


@pytest.mark.parametrize("rule,text", [
    ("slot_pool.cross_engine",
     "unsupported [unmodelled.not_allowed]: 'slot_pool.cross_engine' cannot be replayed as unmodelled: "
     "dropping it would change what is replayed, not only remove a limit, so it stays a hard rejection; "
     "only batch_boundary.open_loop, engine_client.inflight_limit, engine_client.inflight_limit.as_lanes may be allowed (--allow-unmodelled) "
     "(records: slot_pool.cross_engine)"),
    ("no.such_rule",
     "unsupported [unmodelled.not_allowed]: 'no.such_rule' is not a rejection rule of the replay adapter; "
     "only batch_boundary.open_loop, engine_client.inflight_limit, engine_client.inflight_limit.as_lanes may be allowed (--allow-unmodelled) "
     "(records: no.such_rule)"),
])
def test_rule_outside_the_allow_list_is_still_rejected(rule, text):
    # named together with the allowed rule: still a hard rejection, before anything is replayed
    with pytest.raises(UnsupportedWorkloadError) as e:
        check_supported(locked_two_slots(), {"e0": manifest().engines[0]}, unmodelled=(RULE, rule))
    assert str(e.value) == text


def test_opt_in_plan_records_the_dropped_constraint():
    plans, notes = check_supported(locked_two_slots(), {"e0": manifest().engines[0]}, unmodelled=[RULE])
    (c,) = plans["e0"].unmodelled
    assert (c.rule, list(c.record_ids)) == (RULE, ["e0"])
    assert "replayed WITHOUT the client limit" in c.reason and "up to 2 requests" in c.reason
    assert any(n.startswith("UNMODELLED engine_client.inflight_limit") for n in notes)


# ---- real upstream replay (fixed model P = 100 ms, D = 10 ms)

def test_opt_in_replays_both_trajectories_concurrently():
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_workload

    res = replay_workload(locked_two_slots(), manifest(), FIXED, unmodelled=(RULE,))
    t = {r.request_id: (ms(r.arrival_ns), ms(r.first_token_ns), ms(r.completion_ns)) for r in res.requests}
    # the client lock is NOT modelled: a0 and b0 share one prefill pass (0 -> 100) and one decode
    # step (-> 110); after the 5 ms tool wait a1 and b1 arrive together at 115 (-> 215 -> 225).
    # (With the lock the real driver would have run them one at a time.)
    assert t == {"a0": (0.0, 100.0, 110.0), "b0": (0.0, 100.0, 110.0),
                 "a1": (115.0, 215.0, 225.0), "b1": (115.0, 215.0, 225.0)}
    assert ms(res.makespan_ns) == 225.0
    (c,) = res.unmodelled_constraints
    assert c.rule == RULE and list(c.record_ids) == ["e0"] and "WITHOUT the client limit" in c.reason
    assert any(n.startswith("UNMODELLED engine_client.inflight_limit") for n in res.notes)


def test_exact_replay_has_no_unmodelled_constraints():
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_workload

    ix = index(req("a0", traj="A", turn=0), traj("A", ["a0"], pool="p", order=0), pool("p", 1), client("e0", 1))
    res = replay_workload(ix, manifest(), FIXED, unmodelled=(RULE,))  # allowed but never binds
    assert not res.unmodelled_constraints and any("never binds" in n for n in res.notes)


def _write_trace(d, ix):
    from unirl_replay.contract.trace_io import TraceWriter

    msgs = [*ix.requests, *ix.trajectories.values(), *ix.slot_pools.values(), *ix.engine_clients.values()]
    with TraceWriter(d) as tw:
        for m in msgs:
            tw.write_workload(record(m))
        tw.finalize(manifest())
    return d


def test_cli_default_rejects_opt_in_replays(tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    import json

    trace = _write_trace(tmp_path / "trace", locked_two_slots())
    args = ["replay", str(trace), "--timing-model", FIXED, "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert "--allow-unmodelled engine_client.inflight_limit" in capsys.readouterr().err
    assert main([*args, "--allow-unmodelled", "slot_pool.partial", "--allow-unmodelled", RULE]) == 2
    assert "unsupported [unmodelled.not_allowed]" in capsys.readouterr().err
    assert main([*args, "--allow-unmodelled", RULE]) == 0
    assert "UNMODELLED [engine_client.inflight_limit]" in capsys.readouterr().err
    doc = json.loads((tmp_path / "o" / "replay_result.json").read_text())
    assert [c["rule"] for c in doc["unmodelled_constraints"]] == [RULE]
    assert doc["unmodelled_constraints"][0]["record_ids"] == ["e0"]


def test_as_lanes_opt_in_replays_the_limit_as_lanes():
    plans, notes = check_supported(locked_two_slots(), {"e0": manifest().engines[0]}, unmodelled=[RULE + ".as_lanes"])
    (c,) = plans["e0"].unmodelled
    assert c.rule == RULE and "lanes = the client limit (1)" in c.reason and "pessimistic" in c.reason
    assert plans["e0"].lanes == 1


def test_cli_convert_records_the_dropped_constraint_in_the_sidecar(tmp_path, capsys):
    # a converted file WITHOUT a constraint must never pass for an exact conversion: its sidecar names
    # what it lacks, the command says so, and an exact conversion has no such entry
    import json

    trace = _write_trace(tmp_path / "trace", locked_two_slots())
    out = tmp_path / "conv" / "in.jsonl"
    args = ["convert", str(trace), "--out", str(out)]
    assert main(args) == 2  # rejected by default, nothing written
    assert not out.exists()
    capsys.readouterr()
    assert main([*args, "--allow-unmodelled", RULE]) == 0
    err = capsys.readouterr().err
    assert f"UNMODELLED [{RULE}]" in err and "in.jsonl.unirl-replay.json" in err
    side = json.loads((tmp_path / "conv" / "in.jsonl.unirl-replay.json").read_text())
    (c,) = side["unmodelled"]
    assert c["rule"] == RULE and c["record_ids"] == ["e0"] and "WITHOUT the client limit" in c["reason"]

    exact = _write_trace(tmp_path / "exact", index(req("a0", traj="A", turn=0), traj("A", ["a0"], pool="p", order=0),
                                                   pool("p", 1), client("e0", 1)))
    assert main(["convert", str(exact), "--out", str(tmp_path / "x.jsonl")]) == 0
    assert "unmodelled" not in json.loads((tmp_path / "x.jsonl.unirl-replay.json").read_text())


@pytest.mark.parametrize("allow", [(), (RULE,), (RULE + ".as_lanes",)])
def test_a_client_limit_of_zero_is_a_format_error_under_every_opt_in(allow):
    # inflight_request_limit 0 (present): no request could ever be in flight. validate refuses it
    # (engine_client.limit); an ungated caller gets that rule too, never 0 lanes (upstream: "agentic_lanes must be at
    # least 1", a traceback from `replay --allow-unmodelled engine_client.inflight_limit.as_lanes`)
    from unirl_replay.contract.errors import TraceFormatError

    ix = index(req("a0", traj="A", turn=0), req("a1", traj="A", turn=1, deps=[dep("a0", 5)]),
               req("b0", traj="B", turn=0), traj("A", ["a0", "a1"], pool="p", order=0), traj("B", ["b0"], pool="p", order=1),
               pool("p", 2), client("e0", 0))
    with pytest.raises(TraceFormatError) as e:
        check_supported(ix, {"e0": manifest().engines[0]}, unmodelled=allow)
    assert e.value.rule == "engine_client.limit" and e.value.record_id == "e0"
