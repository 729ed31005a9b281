"""The grid on a real Ray cluster with 2 workers: one node (2 CPUs: two worker processes), on loopback.

(One node rather than a head + 2 worker nodes: on this shared 2-core machine a second and third
raylet often miss Ray's fixed 30 s registration deadline; the scheduling is the same.)

The driver connects with ``--address`` (as on a cluster); the results must equal the local
process-pool backend's and the plain sequential path's, job by job, by request-level digest and
report. Ray is started small (no dashboard) and always shut down (fixture with ``finally``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

# Every Ray process of this test on 127.0.0.1 (Ray reads it at import; otherwise it advertises the
# host's external interface address)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from grid_helpers import assert_grid_equals, sequential_reference, small_spec

from unirl_replay.cli.main import main

pytest.importorskip("dynamo.replay")


@pytest.fixture(scope="module")
def ray_cluster():
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    assert not ray_constants.ENABLE_RAY_CLUSTER, "Ray was imported before this module set loopback-only mode"
    from ray._common.utils import get_ray_address_file

    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # private: other Ray users on the host share /tmp/ray
    # Cluster writes the host's address file under Ray's default temp root (/tmp/ray, or $RAY_TMPDIR/ray) whatever
    # temp_dir says; on a host where no Ray ran yet that directory is missing and the head node's start fails with
    # FileNotFoundError (this test passed only when an earlier test had started Ray).
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
    cluster = None
    try:
        for attempt in range(3):  # Ray gives a raylet a fixed 30 s to register: a loaded host can miss it
            try:
                cluster = Cluster(initialize_head=True, head_node_args={
                    "num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1", "temp_dir": tmp})
                break
            except Exception:
                if attempt == 2:
                    raise
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def test_ray_cluster_grid_equals_local_backend_and_sequential_path(ray_cluster, tmp_path, capsys):
    reference = sequential_reference(tmp_path / "sequential")
    spec = small_spec(tmp_path / "spec.json")
    rc = main(["grid", str(spec), "--out", str(tmp_path / "ray"), "--address", ray_cluster, "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "ray" / "grid.json").read_text())
    assert doc["backend"] == "ray" and doc["info"]["nodes"] == 1 and doc["info"]["workers"] == 2
    assert_grid_equals(tmp_path / "ray", reference)
    assert main(["grid", str(spec), "--out", str(tmp_path / "local"), "--workers", "2", "--no-progress"]) == 0
    assert_grid_equals(tmp_path / "local", reference)
    local = json.loads((tmp_path / "local" / "grid.json").read_text())
    keys = ("job_id", "status", "replay_sha256", "requests_sha256", "mape_pct", "bias_pct", "label")
    assert [{k: j.get(k) for k in keys} for j in doc["jobs"]] == [{k: j.get(k) for k in keys} for j in local["jobs"]]
    assert len({j["node"] for j in doc["jobs"]}) == 1 and len({j["pid"] for j in doc["jobs"]}) == 2, \
        "the jobs ran as Ray tasks in the cluster's two worker processes"
