"""Dependency rules: predecessors, measured delays, turn order of dependencies, cycles."""

from __future__ import annotations

from typing import Iterator

from unirl_replay.contract.validate.context import TraceState, _unpack
from unirl_replay.v1 import workload_pb2 as w


class DependencyRules(TraceState):
    def _dependencies1(self, line: int, r: w.Request) -> None:
        f, rid = self.wfile, r.request_id
        preds: set[str] = set()
        for i, d in enumerate(r.dependencies):
            self._enum(f, line, rid, f"dependencies[{i}].trigger", d.trigger)
            self._enum(f, line, rid, f"dependencies[{i}].relation", d.relation)
            has_delay = d.HasField("external_delay_ns")
            if has_delay == bool(d.delay_absence):
                self.v("dependency.delay_absence", f, line, rid, f"dependencies[{i}] needs exactly one of "
                       f"external_delay_ns (measured, 0 is a real 0) and delay_absence (why not measured)")
            if has_delay:
                self._time(f, line, rid, f"dependencies[{i}].external_delay_ns", d.external_delay_ns)
            if d.predecessor_request_id in preds:
                self.v("dependency.duplicate", f, line, rid, f"predecessor {d.predecessor_request_id!r} listed twice")
            preds.add(d.predecessor_request_id)

    def _dependencies2(self, line: int, r: w.Request) -> None:
        f, rid = self.wfile, r.request_id
        if not r.dependencies:
            return
        me = self.req.get(rid)
        my_traj, my_turn, _ = _unpack(me) if me is not None else (0, None, 0)
        if not r.trajectory_id:
            self.v("dependency.no_trajectory", f, line, rid, "request with dependencies has no trajectory_id "
                   "(dependencies stay inside one trajectory)")
        for d in r.dependencies:
            p = d.predecessor_request_id
            if p == rid:
                self.v("dependency.cycle", f, line, rid, "request depends on itself")
                continue
            pv = self.req.get(p)
            if pv is None:
                self.v("dependency.unresolved", f, line, rid, f"predecessor {p!r} is no request of this trace")
                continue
            p_traj, p_turn, _ = _unpack(pv)
            ordered = bool(my_traj) and p_traj == my_traj and p_turn is not None and my_turn is not None and p_turn < my_turn
            if not ordered:
                self.suspicious_traj.update((my_traj, p_traj))
            if p_traj != my_traj and r.trajectory_id:
                self.v("dependency.cross_trajectory", f, line, rid, f"predecessor {p!r} is in trajectory "
                       f"{self.traj_names[p_traj]!r}, this request in {r.trajectory_id!r}")
            elif p_traj == my_traj and my_traj and p_turn is not None and my_turn is not None and p_turn >= my_turn:
                self.v("turn.dependency_order", f, line, rid, f"predecessor {p!r} is turn {p_turn}, "
                       f"not earlier than this turn {my_turn}")

    # third pass (only when needed): cycles among dependencies that do not point to earlier turns
    def cycles(self) -> None:
        if not self.suspicious_traj:
            return
        adj: dict[str, list[str]] = {}
        line_of: dict[str, int] = {}
        for line, rec in self.t.iter_workload(on_error=lambda e: None):  # reported in pass 1
            if rec.WhichOneof("record") != "request" or not rec.request.dependencies:
                continue
            r = rec.request
            me = self.req.get(r.request_id)
            if me is None or _unpack(me)[0] not in self.suspicious_traj:
                continue
            preds = [d.predecessor_request_id for d in r.dependencies
                     if d.predecessor_request_id in self.req and d.predecessor_request_id != r.request_id]
            if preds:
                adj[r.request_id] = preds
                line_of[r.request_id] = line
        state: dict[str, int] = {}  # 1 on stack, 2 done
        for start in adj:
            if state.get(start):
                continue
            stack: list[tuple[str, Iterator[str]]] = [(start, iter(adj.get(start, ())))]
            state[start] = 1
            path = [start]
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    path.pop()
                    continue
                s = state.get(nxt)
                if s == 1:
                    cyc = path[path.index(nxt):]
                    self.v("dependency.cycle", self.wfile, line_of.get(nxt, 0), nxt,
                           "dependency cycle: " + " -> ".join([*cyc, nxt]))
                elif not s:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(adj.get(nxt, ()))))
