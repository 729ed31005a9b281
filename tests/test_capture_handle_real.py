"""The driver-side ``rollout.generate`` hook on UniRL's real Ray wiring, without an engine (reference env).

A local Ray cluster, UniRL's ``DevicePool.setup()`` with 2 Worker actors on CPU (the CPU bridges'
``runtime_env``, as the README's CPU recipe passes it), a trivial ``@distributed(DP_SCATTER)`` role
(``reference/echo_role.py``) created through ``placement`` / ``remote``, two ``rollout.generate``
calls: the driver's shard holds one ``rollout_generate`` per call, with the rollout id and the root
sample ids (cross-process ids), and every shard closes cleanly at ``pool.shutdown()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REF = Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", ROOT / ".venv-ref" / "bin" / "python"))

RECIPE = r'''
import os, sys
if __name__ == "__main__":
    os.environ["UNIRL_REPLAY_TRACE_DIR"] = sys.argv[1]
    import ray
    import unirl_replay.capture
    from unirl_replay.reference import cpu_bridges
    unirl_replay.capture.install()
    for attempt in range(3):  # a loaded host can time out the local node's start
        try:
            ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
                     runtime_env=cpu_bridges.runtime_env())
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    from unirl.distributed.group.device_pool import DevicePool
    from unirl.distributed.group.placement import placement, remote
    from unirl_replay.reference.echo_role import EchoRollout
    from unirl_replay.reference.rollout_driver import _request
    pool = DevicePool(num_devices=2, devices_per_node=2, workers_per_device=1)
    pool.setup()  # CPU bridge 5: the Workers' NCCL group is skipped
    with placement(pool, fraction=1.0, shared_workers=True):
        rollout = remote(EchoRollout, delay_s=0.05)
    for b in range(2):
        out = rollout.generate(_request([f"p{i}" for i in range(4)], b, b * 4))
        assert len(out.parts[-1].sample_ids) == 4
    pool.shutdown()
    ray.shutdown()
'''


@pytest.mark.reference
@pytest.mark.skipif(not REF.exists(), reason="reference environment (.venv-ref) absent: run `make reference-env`")
def test_driver_generate_hook_and_device_pool_setup_on_cpu(tmp_path):
    script = tmp_path / "recipe.py"
    script.write_text(RECIPE)
    proc = subprocess.run([str(REF), str(script), str(tmp_path / "cap")], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sys.path.insert(0, str(ROOT / "python"))
    from unirl_replay.capture.finalize import read_shards

    shards = read_shards(tmp_path / "cap" / "raw")
    drivers = [s for s in shards if s.role == "driver"]
    assert len(drivers) == 1 and all(s.clean_exit for s in shards), [(s.name, s.clean_exit) for s in shards]
    gens = [r for r in drivers[0].records if r["kind"] == "rollout_generate"]
    assert [g["rollout_ids"] for g in gens] == [[0], [1]]
    assert gens[1]["groups"] == [f"r1:prompt:{p}:sample:0" for p in range(4, 8)]
    assert all(g["role_class"] == "EchoRollout" and g["dp_size"] == 2 and g["samples"] == 4 and not g["error"]
               for g in gens)
    assert all(g["exit"]["monotonic"] - g["enter"]["monotonic"] >= 0.05 for g in gens)
    json.dumps([g for g in gens])  # plain JSON: nothing process-local in the record
