"""Manifest rules: the capture window, enums of the trace and its engines."""

from __future__ import annotations

from unirl_replay.contract.trace_io import MANIFEST_FILE
from unirl_replay.contract.validate.context import TraceState


class ManifestRules(TraceState):
    def manifest(self) -> None:
        m, f = self.m, MANIFEST_FILE
        if not m.trace_id:
            self.v("manifest.trace_id", f, 0, "", "trace_id is empty (results and reports are tied to it)")
        self._known_enums(f, 0, m.trace_id, m)
        self._good_ids(f, 0, m.trace_id, m)
        if not m.HasField("window") or m.window.duration_ns <= 0:
            self.v("manifest.window", f, 0, m.trace_id, "capture window missing or duration_ns <= 0")
        self._enum(f, 0, m.trace_id, "window.clock_domain", m.window.clock_domain)
        self._enum(f, 0, m.trace_id, "role", m.role)
        self._enum(f, 0, m.trace_id, "privacy.content", m.privacy.content)
        self._enum(f, 0, m.trace_id, "cache_state", m.cache_state)
        seen: set[str] = set()
        for e in m.engines:
            if not e.engine_id or not e.block_size_tokens:
                self.v("manifest.engine", f, 0, e.engine_id, "engine needs engine_id and block_size_tokens > 0")
            elif e.engine_id in seen:
                self.v("id.duplicate", f, 0, e.engine_id, f"engine id {e.engine_id!r} listed twice")
            seen.add(e.engine_id)
