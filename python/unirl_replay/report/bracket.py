"""Brackets for an unmodelled constraint: the bounds upstream can express, and where the truth falls.

Where a trace's constraint cannot be expressed upstream (today: UniRL's engine-client in-flight
limit, ``engine_client.inflight_limit``), no single replay is the prediction. Upstream can express
two bounds: lanes = trajectory slots with the limit dropped (optimistic: requests overlap more
than the client allowed) and lanes = the limit (pessimistic: whole trajectories, tool waits
included, hold the engine). Both are UNMODELLED replays of the same trace. Optimistic and
pessimistic are said of batch readiness: with fewer lanes each request shares its passes with
fewer others, so request and trajectory E2E (timed from when a lane is free) can come out the
other way round. The bracket reports,
per metric, each bound's mean and bias, the measured mean, and how many records' measured value
lies between the two bounds' values for that record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from unirl_replay.report.keys import L_BATCH, L_REQ, L_TRAJ, Pairs
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb

BRACKETED = ((L_BATCH, "batch_readiness"), (L_TRAJ, "trajectory_e2e"), (L_REQ, "e2e"))


def bound_name(replay: rpb.ReplayResult) -> str:
    """Readable name of the bound a replay is, from its unmodelled constraints."""
    reasons = " ".join(c.reason for c in replay.unmodelled_constraints)
    if "lanes = the client limit" in reasons:
        return "lanes = the client limit (pessimistic bound of batch readiness)"
    if "WITHOUT the client limit" in reasons:
        return "lanes = slots, client limit dropped (optimistic bound of batch readiness)"
    return "UNMODELLED replay"


def brackets(results: Sequence[tuple[str, rpb.ReplayResult, Mapping[tuple[int, str], Pairs]]]
             ) -> list[vpb.UnmodelledBracket]:
    """One bracket per bracketed metric paired in every result.

    Args:
        results: ``(where the result came from, result, its matched pairs)``; at least two.
    """
    out = []
    rules = sorted({c.rule for _, r, _ in results for c in r.unmodelled_constraints})
    for key in BRACKETED:
        per = []
        for src, r, pairs in results:
            p = pairs.get(key)
            if p is None or not len(p.ids):
                break
            per.append((src, r, dict(zip(p.ids, zip(p.measured_ns.tolist(), p.predicted_ns.tolist())))))
        else:
            common = [i for i in per[0][2] if all(i in x[2] for x in per)]
            if not common:
                continue
            meas = np.array([per[0][2][i][0] for i in common], dtype=np.float64) / 1e6
            preds = [np.array([x[2][i][1] for i in common], dtype=np.float64) / 1e6 for x in per]
            lo, hi = np.minimum.reduce(preds), np.maximum.reduce(preds)
            inside = int(np.count_nonzero((meas >= lo) & (meas <= hi)))
            b = vpb.UnmodelledBracket(rule=", ".join(rules) or "unmodelled", level=key[0], metric=key[1],
                                      measured_mean_ms=float(meas.mean()), records=len(common), records_inside=inside)
            for (src, r, _), pr in zip(per, preds):
                b.bounds.append(vpb.BracketBound(name=bound_name(r), replay_result=src, mean_ms=float(pr.mean()),
                                                 signed_bias_pct=float(np.mean(100 * (pr - meas) / meas))))
            lo_m, hi_m = min(x.mean_ms for x in b.bounds), max(x.mean_ms for x in b.bounds)
            where = ("inside" if lo_m <= b.measured_mean_ms <= hi_m else
                     "BELOW both bounds" if b.measured_mean_ms < lo_m else "ABOVE both bounds")
            frac = (b.measured_mean_ms - lo_m) / (hi_m - lo_m) if hi_m > lo_m else 0.0
            b.reading = (f"the measured mean {b.measured_mean_ms:.1f} ms lies {where} ({lo_m:.1f} .. {hi_m:.1f} ms"
                         + (f", {100 * frac:.0f} % of the way from the lower to the upper bound" if where == "inside"
                            else "") + ")")
            named = {x.name: x.mean_ms for x in b.bounds}
            opt, pes = (next((v for k, v in named.items() if w in k), None) for w in ("optimistic", "pessimistic"))
            if key[1] != "batch_readiness" and opt is not None and pes is not None and pes < opt:
                b.reading += (": here the pessimistic bound (of batch readiness) is the shorter one, as it can be below "
                              "the batch level (with one lane a request or trajectory, timed from when it gets the lane, "
                              "shares passes with fewer others)")
            out.append(b)
    return out


def locked_handoffs(rows: Sequence[tuple[str, int, int, int]]) -> tuple[int, list[int]]:
    """Engine-idle handoffs between requests a client held back: per engine, consecutive requests in vLLM queue
    order where the next was submitted before the previous completed and reached the queue after it completed.

    Args:
        rows: ``(engine_id, submit_ns, queued_ns, completion_ns)`` per measured request.
    Returns:
        ``(count, gaps_ns)``: how many such pairs, and each one's ``next queued - previous completion`` (ns): time
        the engine ran nothing while a request waited in the client (UniRL's lock: the previous request's return,
        the lock, the pipe and vLLM's input processing). Neither lanes bound has it.
    """
    by: dict[str, list[tuple[int, int, int]]] = {}
    for eid, sub, q, done in rows:
        by.setdefault(eid, []).append((q, sub, done))
    gaps = []
    for reqs in by.values():
        reqs.sort()
        for (_, _, done_a), (q_b, sub_b, _) in zip(reqs, reqs[1:]):
            if sub_b <= done_a <= q_b:
                gaps.append(q_b - done_a)
    return len(gaps), gaps


def handoff_words(gaps_ns: Sequence[int]) -> str:
    """The bracket's words for :func:`locked_handoffs`, e.g. ``"between requests held back by the client the
    engines sat idle 680.3 ms in the window (35 handoffs, median 11.6 ms: ...)"``."""
    return (f"between requests held back by the client the engines sat idle {sum(gaps_ns) / 1e6:.1f} ms in the "
            f"window ({len(gaps_ns)} handoffs, median {float(np.median(gaps_ns)) / 1e6:.1f} ms: previous last token -> next "
            "vLLM queued, the next already submitted), client time neither bound has")

