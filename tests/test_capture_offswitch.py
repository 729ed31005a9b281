"""The capture is off unless UNIRL_REPLAY_TRACE_DIR names a directory (light env, no vLLM needed).

Off means: calling the vLLM plugin entry point imports nothing from vllm / unirl / torch or the
capture internals, patches nothing and writes no file. Each check runs in a fresh interpreter so
sys.modules is clean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json, os, sys
before = set(sys.modules)
from unirl_replay.capture import vllm_plugin
after_import = set(sys.modules)
vllm_plugin.register()
vllm_plugin.register()   # vLLM may call it more than once
after_register = set(sys.modules)
from unirl_replay.reference import cpu_bridges
cpu_bridges.install_vllm_process_bridges()   # the second entry point: off without UNIRL_REPLAY_CPU_BRIDGES=1
after = set(sys.modules)
print(json.dumps({"new_on_import": sorted(after_import - before), "new_on_register": sorted(after_register - after_import),
                  "new_on_bridges": sorted(after - after_register),
                  "installed": vllm_plugin._installed, "bridges": cpu_bridges._vllm_bridges_installed,
                  "driver_bridges": cpu_bridges._driver_bridges_installed}))
"""

HEAVY = ("vllm", "unirl.", "torch", "transformers")
INTERNALS = ("unirl_replay.capture._engine_recorder", "unirl_replay.capture.driver_capture",
             "unirl_replay.capture.hashing", "unirl_replay.capture.trace_builder",
             "unirl_replay.capture.shard", "unirl_replay.capture.switch", "unirl_replay.capture.finalize",
             "unirl_replay.reference.rollout_driver", "unirl_replay.reference.tiny_model")


def _probe(tmp_path: Path, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("UNIRL_REPLAY_TRACE_DIR", "UNIRL_REPLAY_CPU_BRIDGES", "UNIRL_REPLAY_TRACE_SALT")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _assert_inert(res: dict) -> None:
    new = res["new_on_import"] + res["new_on_register"] + res["new_on_bridges"]
    assert not [m for m in new if m == "unirl" or m.startswith(HEAVY)], new
    assert not [m for m in new if m in INTERNALS], new
    assert res["installed"] is False
    assert res["bridges"] is False and res["driver_bridges"] is False


def test_register_without_trace_dir_imports_and_patches_nothing(tmp_path):
    res = _probe(tmp_path)
    _assert_inert(res)
    assert res["new_on_register"] == []  # register() itself imports nothing at all
    ours = {m for m in res["new_on_import"] if m.startswith("unirl_replay")}
    assert ours <= {"unirl_replay", "unirl_replay.capture", "unirl_replay.capture.vllm_plugin"}, ours
    assert list(tmp_path.iterdir()) == []


def test_register_with_trace_dir_outside_the_llm_process_does_nothing(tmp_path):
    """EngineCore / worker processes (no vllm.entrypoints.llm loaded) are skipped even when on."""
    trace = tmp_path / "trace"
    res = _probe(tmp_path, UNIRL_REPLAY_TRACE_DIR=str(trace))
    _assert_inert(res)
    assert not trace.exists()
    assert list(tmp_path.iterdir()) == []
