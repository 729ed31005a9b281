"""The harness's lookup tool: a UniRL ``Tool`` with a real, seeded wait (imports UniRL: reference env only)."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from unirl.rollout.env.tools.base import Tool


class LookupTool(Tool):
    """A local tool with a real, seeded wait (stands in for a slow service).

    Module-level so Ray pickles it by reference into each engine's actor; the lock is rebuilt there.
    While ``fixed_wait_file`` exists its content (seconds) is the wait: the overhead pairs do equal
    tool work in both runs of a pair.
    """

    name = "lookup"

    def __init__(self, seed: int, wait_ms: Tuple[int, int], fixed_wait_file: str) -> None:
        self.seed, self.wait_ms, self.fixed_wait_file = seed, tuple(wait_ms), fixed_wait_file
        self._rng: Optional[random.Random] = None
        self._lock: Optional[threading.Lock] = None

    def __getstate__(self):
        return {"seed": self.seed, "wait_ms": self.wait_ms, "fixed_wait_file": self.fixed_wait_file}

    def __setstate__(self, state):
        self.__init__(state["seed"], state["wait_ms"], state["fixed_wait_file"])

    def json_schema(self) -> Dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": "Look up a value by key.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}

    def execute(self, arguments: Dict[str, Any]) -> str:
        if self._lock is None:
            self._lock = threading.Lock()
            # one sequence per engine (its UniRL rank), reproducible from the workload seed
            self._rng = random.Random(self.seed * 1009 + int(os.environ.get("RANK", "0") or 0))
        with self._lock:
            try:
                wait = float(Path(self.fixed_wait_file).read_text())
            except (OSError, ValueError):
                wait = self._rng.uniform(self.wait_ms[0] / 1e3, self.wait_ms[1] / 1e3)
        time.sleep(wait)
        return str(sum(map(ord, str(arguments.get("key", "")))) % 97)
