"""What ``validate`` holds per request: the size of each table of its state at the end of a run (issue 17).

    .venv/bin/python benchmarks/validate_state.py TRACE_DIR [--compact on|off|auto]
    .venv/bin/python benchmarks/validate_state.py --write-grpo N OUT_DIR   # a GRPO-shaped trace to measure

The state is measured when the outcome pass ends (the checker's attributes, followed through dicts, lists, sets,
tuples and the ``strtable`` arrays; objects shared between tables counted once, at the first). Prints MiB per
table, bytes per request, and the process's peak RSS. ``--write-grpo``: N requests in the bundled grpo-a's shape
(a group per prompt, unit SAMPLES, n = 4 sample ids, 64 groups a rollout batch, observed arrivals; an outcome
per request, group and batch),
arrow encoding.
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_grpo(n: int, out: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tracebuild import MS, TraceParts, make_manifest, make_request, request_outcome
    from unirl_replay.v1 import outcomes_pb2 as o
    from unirl_replay.v1 import workload_pb2 as w

    t = TraceParts(make_manifest(engines=("e0",), window_s=n * 0.02 + 10))
    batches: dict[str, list[str]] = {}
    for p in range(n):
        rid, gid, bid = f"req-{p:07d}", f"r0:prompt:{p}:sample:0", f"batch-{p // 64}"
        r = make_request(rid, samples=4, engine_id="e0", group_id=gid, batch_id=bid, offset_ns=p * 10 * MS)
        r.sample_ids[:] = [f"{gid}/{k}" for k in range(4)]
        t.add(r)
        t.add(w.Group(group_id=gid, rollout_batch_id=bid, unit=w.GROUP_UNIT_SAMPLES, expected_size=4,
                      member_ids=[rid]))
        batches.setdefault(bid, []).append(gid)
        t.add(request_outcome(rid, p * 10 * MS))
        t.add(o.GroupOutcome(group_id=gid, completed_ns=p * 10 * MS + 20 * MS))
    for k, (bid, gids) in enumerate(batches.items()):
        t.add(w.RolloutBatch(rollout_batch_id=bid, group_ids=gids, readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS))
        t.add(o.BatchOutcome(rollout_batch_id=bid, ready_ns=((k + 1) * 64 - 1) * 10 * MS + 20 * MS))
    print(t.write(out, "arrow"))


def _deep(o, seen: set[int]) -> int:
    if id(o) in seen:
        return 0
    seen.add(id(o))
    s = sys.getsizeof(o)
    if isinstance(o, dict):
        for k, v in o.items():
            s += _deep(k, seen) + _deep(v, seen)
    elif isinstance(o, (list, tuple, set, frozenset)):
        for v in o:
            s += _deep(v, seen)
    elif type(o).__module__.startswith("unirl_replay.contract.validate"):
        if hasattr(o, "__dict__"):
            s += _deep(vars(o), seen)
        for k in getattr(type(o), "__slots__", ()):
            if hasattr(o, k):
                s += _deep(getattr(o, k), seen)
    return s


def measure(trace: str, compact: str) -> None:
    from unirl_replay.contract.validate import check_trace, context
    from unirl_replay.contract.validate.checker import _Checker

    if compact != "auto":
        context.COMPACT_FROM_RECORDS = 0 if compact == "on" else 1 << 62
    rows: list[tuple[int, str]] = []
    real = _Checker.outcomes

    def hooked(self):
        real(self)
        skip = {"t", "v", "m", "engines"}
        seen = {id(getattr(self, k)) for k in skip if hasattr(self, k)}
        rows.extend((_deep(val, seen), k) for k, val in vars(self).items() if k not in skip)
        rows.append((-1, f"compact={self.compact}"))
        rows.append((-2, str(len(self.req))))

    _Checker.outcomes = hooked  # type: ignore[method-assign]
    r = check_trace(trace)
    n = int(next(k for s, k in rows if s == -2)) or 1  # the workload's requests
    total = sum(sz for sz, _ in rows if sz > 0)
    for sz, k in sorted(rows, reverse=True):
        if sz > 1024:
            print(f"{sz / 2**20:9.2f} MiB  {sz / n:7.1f} B/request  {k}")
    print(f"total {total / 2**20:.2f} MiB = {total / n:.1f} B per request ({n} requests, "
          f"{r.record_counts['outcomes']} outcome records); "
          f"{[k for s, k in rows if s == -1][0]}; status {type(r).Status.Name(r.status)}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--compact", choices=("on", "off", "auto"), default="auto")
    ap.add_argument("--write-grpo", nargs=2, metavar=("N", "OUT_DIR"))
    a = ap.parse_args()
    if a.write_grpo:
        write_grpo(int(a.write_grpo[0]), Path(a.write_grpo[1]))
    elif a.trace:
        measure(a.trace, a.compact)
    else:
        ap.error("give a TRACE_DIR or --write-grpo N OUT_DIR")


if __name__ == "__main__":
    main()
