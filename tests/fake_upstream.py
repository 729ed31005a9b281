"""A deterministic stand-in for the upstream simulator (tests of the ``replay`` command's paths
without the real upstream): it answers the converter's file with one row per sequence, in file
order, the values drawn from a seeded generator (some requests not completed, some fields
absent), and a fixed wall time, so that two replays of one trace write the same bytes."""

from __future__ import annotations

import json
import random


class Rows(list):
    """The rows list (a list subclass: it can be watched with a weak reference)."""


class FakeUpstream:
    timing_types = ("fixed",)

    def __init__(self, seed: int = 0, odd: float = 0.1, huge_cached: bool = False):
        self.seed, self.odd, self.huge_cached = seed, odd, huge_cached
        self.answers: list = []  # weak references to the rows handed out

    def identity(self):
        from unirl_replay.replay.simulators import Identity
        return Identity("fake", "0")

    def run(self, job):
        import weakref

        from unirl_replay.replay.simulators import SimulatorRun
        rng = random.Random(self.seed)
        rows = Rows()
        with open(job.trace_file) as f:
            for line in f:
                rec = json.loads(line)
                if "request_id" not in rec:
                    continue  # the header
                a = round(rng.uniform(0, 1e4), 3)
                row = {"request_id": rec["request_id"], "arrival_time_ms": a, "first_admit_ms": a + 1.0,
                       "first_token_ms": a + 2.5, "terminal_time_ms": a + rng.uniform(3, 900),
                       "terminal_status": "completed",
                       "reused_input_tokens": 2**40 if self.huge_cached else rng.choice([0, 4, 8])}
                if rng.random() < self.odd:
                    key = rng.choice(["first_admit_ms", "first_token_ms", "terminal_time_ms", "terminal_status"])
                    row[key] = "cancelled" if key == "terminal_status" else None
                rows.append(row)
        self.answers.append(weakref.ref(rows))
        return SimulatorRun(per_request=rows, summary={"completed_requests": len(rows)}, wall_ns=1)
