"""Backends: where a grid's jobs run. Each yields ``(job index, result)`` as jobs finish.

- ``sequential``: in this process, one after another (the reference path).
- ``local``: a process pool on this host (``concurrent.futures``, spawn start method); workers
  are this interpreter, so they use the same pinned environment (``.venv``).
- ``ray``: Ray tasks (one CPU each), on a local Ray instance started here or a cluster
  (``address``). Workers run this interpreter (``runtime_env.py_executable``), so every node
  needs the same checkout + ``.venv`` at the same path (a shared filesystem, or the same image):
  the inputs (trace directories, profiles) and the output directory are reached by path too.

A job's result is a small dict; traces and outputs never pass through the driver. A job's own
error is its result (``jobs.run_job`` never raises). A worker process that dies (killed, out of
memory): on Ray that task is reported as failed and the others run on; in the local pool Python
marks the whole pool broken, so the jobs not finished by then are reported as lost (rerun them).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import MissingEnvironmentError, UnirlReplayError
from unirl_replay.grid.jobs import FAILED, run_job

BACKENDS = ("local", "ray", "sequential")
OBJECT_STORE_BYTES = 256 * 1024**2
#: seconds the driver waits for a TCP connection to a Ray cluster's address before it refuses the address
#: (ray.init itself retries an address nothing answers at for ever: `--address 127.0.0.1:1` hung)
RAY_CONNECT_TIMEOUT_S = 10.0


def _lost(job, why: str) -> dict[str, Any]:
    return {"index": job.index, "job_id": job.job_id, "kind": job.kind, "status": FAILED,
            "error": {"type": "WorkerLost", "message": why}}


def sequential(jobs, out_root: str, info: dict) -> Iterator[tuple[int, dict]]:
    info["workers"] = 1
    info["startup_s"] = 0.0
    for j in jobs:
        yield j.index, run_job(j, out_root)


def local(jobs, out_root: str, info: dict, workers: int | None = None) -> Iterator[tuple[int, dict]]:
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    info["workers"] = n
    t0 = time.perf_counter()
    # spawn: a clean interpreter per worker (no forked threads or locks of the driver)
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
    try:
        futs = {pool.submit(run_job, j, out_root): j for j in jobs}
        info["startup_s"] = round(time.perf_counter() - t0, 3)  # workers start lazily, on first submit
        pending = set(futs)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                j = futs[f]
                try:
                    yield j.index, f.result()
                except Exception as e:  # noqa: BLE001 - a worker process died (BrokenProcessPool)
                    yield j.index, _lost(j, f"worker process died: {type(e).__name__}: {e}")
    finally:  # also on Ctrl-C / an error in the driver: jobs not yet started are dropped, not run
        pool.shutdown(wait=True, cancel_futures=True)


def ray_runtime_env() -> dict[str, Any]:
    """The workers' environment: this interpreter and this checkout's sources (same pinned env)."""
    from unirl_replay.reference.environments import REPO_ROOT

    src = os.pathsep.join([str(REPO_ROOT / "python"), str(REPO_ROOT / "gen" / "python")])
    return {"py_executable": sys.executable, "env_vars": {"PYTHONPATH": src}}


def _host_port(address: str) -> tuple[str, int] | str:
    """``HOST:PORT`` (``[V6]:PORT`` too) -> (host, port), or why it is not one."""
    host, sep, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        return "not HOST:PORT (e.g. 10.0.0.5:6379, or auto)"
    if not 0 < int(port) < 65536:
        return f"port {port} is not a TCP port (1-65535)"
    return host, int(port)


def ray_address_problem(address: str, ray_module=None, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> str | None:
    """Why the Ray cluster ``address`` (``--address``) cannot be connected to, or None: not HOST:PORT, a port out
    of range, nothing accepting a TCP connection there within ``timeout_s`` (refused, unreachable, no such
    host), or a listener that answers the HTTP/2 preface with no SETTINGS frame within ``timeout_s`` (no gRPC
    server, so no Ray GCS: a dashboard, another service; a ``ray://`` Ray Client address is not asked). ``auto`` is resolved as Ray resolves it (RAY_ADDRESS, the address file of the last ``ray start``),
    and HOST:PORT to what Ray connects to (localhost -> this node's address); ``local`` (a new instance) is
    Ray's to start. Checked before ray.init, which waits for an address nothing answers at for ever."""
    import socket

    if address == "local":
        return None
    if not address.strip():
        return "an empty address (leave --address out for a private local Ray instance)"
    target = address
    if address.startswith("ray://"):
        target = address.removeprefix("ray://")
    elif ray_module is not None:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address) or ""
        except Exception as e:  # noqa: BLE001 - a malformed address Ray cannot parse either
            return f"{type(e).__name__}: {str(e)[:200]}"
        if not target:  # auto with no cluster recorded: ray.init says so itself, at once
            return None
    hp = _host_port(target)
    if isinstance(hp, str):
        return hp
    shown = target if target == address else f"{target} (what {address!r} resolves to)"
    try:
        with socket.create_connection(hp, timeout=timeout_s) as conn:
            if address.startswith("ray://"):
                return None  # a Ray Client server: its own protocol on top, left to ray.init
            first = _http2_reply(conn, timeout_s)
    except OSError as e:  # ConnectionRefusedError, timeout, no route, unknown host (gaierror)
        why = e.strerror or str(e) or type(e).__name__
        return (f"nothing accepts a connection at {shown} within {timeout_s:.0f} s ({type(e).__name__}: {why}): "
                "is the cluster's head node up (`ray start --head` there) and the port its GCS port?")
    if first is None or len(first) < 9 or first[3] != 0x4:
        return (f"something listens at {shown}, but it answered no HTTP/2 SETTINGS frame within {timeout_s:.0f} s "
                f"({'no answer' if not first else f'{len(first)} bytes, not a gRPC server'}): a Ray cluster's address "
                "is its head node's GCS port (`ray start --head` prints it; default 6379), not a dashboard or "
                "another service")
    if ray_module is not None:
        return _gcs_problem(target, shown)
    return None


def _gcs_problem(target: str, shown: str) -> str | None:
    """Why the gRPC server at ``target`` is no Ray GCS, or None: Ray's own GCS client asks it for the cluster id
    (it gives up after about 30 s; ray.init on a gRPC port that is not a GCS, a Ray Client port given without
    ``ray://`` for one, retries for ever)."""
    try:
        from ray._raylet import GcsClient
    except ImportError:  # another Ray layout: left to ray.init
        return None
    try:
        GcsClient(address=target).cluster_id  # noqa: B018 - the call is the question
    except Exception as e:  # noqa: BLE001 - RpcError (Deadline Exceeded, Unimplemented ...)
        return (f"a gRPC server answers at {shown}, but not as a Ray GCS ({type(e).__name__}: {str(e)[:160]}): a Ray "
                "cluster's address is its head node's GCS port (`ray start --head` prints it; default 6379); a Ray "
                "Client port (default 10001) is given as ray://HOST:PORT")
    return None


#: the HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5): a gRPC server (Ray's GCS)
#: answers with its own SETTINGS frame (type 0x4) at once
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _http2_reply(conn, timeout_s: float) -> bytes | None:
    """The first 9 bytes (one frame header) a server sends back after the HTTP/2 preface, or what came before it
    closed or went silent for ``timeout_s`` (None: nothing). ray.init on an address whose listener is not a GCS waits
    for ever; this asks the one question a gRPC server answers in a round trip."""
    conn.settimeout(timeout_s)
    try:
        conn.sendall(_H2_PREFACE)
        got = b""
        while len(got) < 9:
            chunk = conn.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:  # timed out / reset: what came so far
        pass
    return got or None


def ray(jobs, out_root: str, info: dict, workers: int | None = None,
        address: str | None = None) -> Iterator[tuple[int, dict]]:
    """Run on Ray. Without ``address`` a private local instance is started (``workers`` CPUs, no
    dashboard, loopback only, its own temp dir) and stopped afterwards; with one, this driver
    connects to that cluster and disconnects."""
    local_instance = address is None
    if local_instance and "ray" not in sys.modules:
        # a single-host instance: every Ray process on 127.0.0.1 (read by Ray at import)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray as _ray
    except ImportError:
        raise MissingEnvironmentError("--backend ray needs Ray: install the `grid` extra "
                                      "(`uv sync --extra replay --extra grid`, done by scripts/bootstrap.sh)") from None
    t0 = time.perf_counter()
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "runtime_env": ray_runtime_env()}
    tmp = None
    if local_instance:
        tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        # results are ~2 KB each: a small object store instead of Ray's default 30 % of memory
        kw.update(num_cpus=max(1, workers or os.cpu_count() or 1), _node_ip_address="127.0.0.1", _temp_dir=tmp,
                  object_store_memory=OBJECT_STORE_BYTES)
    else:
        why = ray_address_problem(address, _ray)
        if why:
            raise UnirlReplayError(f"--address {address!r}: {why} [grid.ray_address]")
        kw["address"] = address
    try:
        try:
            _ray.init(**kw)
        except Exception as e:  # noqa: BLE001 - e.g. a raylet that missed its registration deadline
            raise UnirlReplayError(f"Ray could not {'start' if local_instance else 'connect to ' + address}: "
                                   f"{type(e).__name__}: {str(e)[:400]}") from None
        info["workers"] = int(_ray.cluster_resources().get("CPU", 0))
        info["nodes"] = len([n for n in _ray.nodes() if n.get("Alive")])
        info["address"] = address or "local"
        info["startup_s"] = round(time.perf_counter() - t0, 3)
        task = _ray.remote(num_cpus=1, max_retries=0)(run_job)
        refs = {task.remote(j, out_root): j for j in jobs}
        pending = list(refs)
        while pending:
            done, pending = _ray.wait(pending, num_returns=1)
            for ref in done:
                j = refs[ref]
                try:
                    yield j.index, _ray.get(ref)
                except Exception as e:  # noqa: BLE001 - worker crashed / task lost: that job's failure
                    yield j.index, _lost(j, f"ray task failed: {type(e).__name__}: {str(e)[:600]}")
    finally:
        _ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def run(backend: str, jobs, out_root: str | Path, info: dict, workers: int | None = None,
        address: str | None = None) -> Iterator[tuple[int, dict]]:
    out = str(out_root)
    if backend == "sequential":
        return sequential(jobs, out, info)
    if backend == "local":
        return local(jobs, out, info, workers)
    if backend == "ray":
        return ray(jobs, out, info, workers, address)
    raise ValueError(f"unknown backend {backend!r}; use one of {BACKENDS}")
