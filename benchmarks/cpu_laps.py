"""Shared by the benchmark scripts: add a function's CPU time (``time.process_time``, seconds) to a laps dict."""

from __future__ import annotations

import time
from typing import Any


def wrap_cpu(owner: Any, name: str, laps: dict[str, float], key: str) -> None:
    """Replace ``owner.name`` by a wrapper adding each call's CPU seconds to ``laps[key]`` (calls pass through)."""
    f = getattr(owner, name)

    def timed(*args, **kw):
        c = time.process_time()
        try:
            return f(*args, **kw)
        finally:
            laps[key] = laps.get(key, 0.0) + time.process_time() - c
    setattr(owner, name, timed)
