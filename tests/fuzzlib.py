"""A seeded mutation fuzzer over the bundled and conformance traces (issue 13).

Each mutant is a copy of a seed trace (``traces/*``, the valid conformance cases, the example bases
of :data:`EXAMPLE_SEEDS`; JSONL and a binpb and an arrow re-encoding of each) with ONE mutation of one class:

- ``byte``: flip / insert / delete bytes or truncate an artifact, the manifest's digests left
  stale (must read INCOMPLETE) or re-sealed (reaches the parsers);
- ``json``: one JSONL line rewritten: duplicate key, NaN, huge number, deep nesting, wrong type,
  unknown enum number, control character in an id, blank or cut line, dropped key (re-sealed);
- ``semantic``: records edited through the messages and re-written by TraceWriter: a dependency
  cycle, a group in two rollout batches, 4e9 output tokens, tokens over max_model_len, tiny engine
  capacities, duplicate / empty / control-character ids, missing arrival, negative time, a
  measured time missing without a reason, a group completed before its requests, unknown sample
  timings, a request's group disagreeing with its group, a rollout batch's after_batch naming no
  batch, itself or nothing, with a negative gap or in a cycle, a request submitted before the batch
  its batch waited for was ready; and neutral edits (halved outputs, simultaneous arrivals, shuffled
  records, longer waits, every batch chained after the one before it);
- ``manifest``: schema_version twice or v2, artifact paths leaving the directory, unknown
  encoding / clock numbers, wrong counts / sizes, empty window, absurd max_model_len;
- ``filesystem``: an artifact replaced by a symlink, a FIFO or a directory; manifest missing;
  leftover partial files or writer lock;
- ``result``: a replay result of an accepted seed, JSON-mutated, given to compare.

Every mutant goes through ``validate`` (``check_trace`` and the CLI's exit code), the gate of
every stage, and, when the gate lets it through, convert (both formats), replay (real upstream,
``fixed:10,1``) and compare. A mutant FAILS the run when any stage raises something other than a
typed error of the package (a crash), an exit code is outside the documented ones, a mutation
that breaks a contract rule is accepted (a silent accept), or validate and the gate disagree.

``python tests/fuzzlib.py --mutants 2000 --seed 13`` (``make fuzz``) prints the counts per class,
mutation and stage; ``tests/test_fuzz.py`` runs a few hundred in the default suite.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from unirl_replay.cli.main import main as cli_main  # noqa: E402
from unirl_replay.contract import json_profile, trace_io  # noqa: E402
from unirl_replay.contract.errors import TraceRejectedError, UnirlReplayError  # noqa: E402
from unirl_replay.contract.gate import gate  # noqa: E402
from unirl_replay.contract.outcomes_io import iter_outcomes  # noqa: E402
from unirl_replay.contract.validate import check_trace  # noqa: E402
from unirl_replay.v1 import workload_pb2 as w  # noqa: E402
from unirl_replay.v1.manifest_pb2 import TraceManifest  # noqa: E402
from unirl_replay.v1.report_pb2 import TraceCheck  # noqa: E402

VALID = TraceCheck.STATUS_VALID
VALIDATE_EXITS = {0, 1, 3}
COMMAND_EXITS = {0, 2}
ALLOW = ("engine_client.inflight_limit",)


class NotApplicable(Exception):
    """The mutation does not apply to this seed (another one is drawn)."""


# ---------------------------------------------------------------------------------------------
# seeds


@dataclass
class Seed:
    name: str
    dir: Path
    encoding: str


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
        return True
    except ImportError:
        return False


#: the arrow re-encoding of every seed too, where the ``columnar`` extra is installed (s10-attack: without
#: arrow seeds no byte mutation reached the Arrow reader; 1 in 10 single-byte flips of an arrow file was a
#: UnicodeDecodeError traceback)
ARROW = _has_pyarrow()

#: example bases (contract/validate/examples.py) that are seeds too: they hold fields no bundled trace
#: holds yet (``batches``: RolloutBatch.after_batch), so the line / record mutations reach them
EXAMPLE_SEEDS = ("batches",)


def seeds(work: Path) -> list[Seed]:
    """The bundled traces, every valid conformance case trace and the :data:`EXAMPLE_SEEDS`, in JSONL
    and re-encoded binpb and (:data:`ARROW`) arrow."""
    from unirl_replay.contract.validate.examples import Example, materialize

    dirs = sorted(p.parent for p in (REPO / "traces").glob("*/manifest.json"))
    dirs += sorted(p.parent for p in (REPO / "conformance" / "cases").glob("*/trace/manifest.json"))
    for base in EXAMPLE_SEEDS:
        d = work / "seeds" / f"example-{base}"
        if not d.exists():
            materialize(Example(base, ()), d)
        dirs.append(d)
    out = []
    for d in dirs:
        if check_trace(d).status != VALID:
            continue  # the reject_* cases the gate refuses: not a base for "breaks a rule"
        name = d.name if d.name != "trace" else d.parent.name
        out.append(Seed(name, d, trace_io.open_trace(d).encoding))
        m, wl, oc = load(d)
        bd = work / "seeds" / f"{name}.binpb"
        if not bd.exists():
            rewrite(bd, m, wl, oc, "binpb")
        out.append(Seed(name + ".binpb", bd, "binpb"))
        if ARROW:
            ad = work / "seeds" / f"{name}.arrow"
            if not ad.exists():
                rewrite(ad, m, wl, oc, "arrow")
            out.append(Seed(name + ".arrow", ad, "arrow"))
    return out


def load(d: Path):
    t = trace_io.open_trace(d)
    wl = [r for _, r in t.iter_workload()]
    oc = [r for _, r in iter_outcomes(t)]
    return t.manifest, wl, oc


def rewrite(d: Path, m: TraceManifest, wl, oc, encoding: str) -> None:
    if d.exists():
        shutil.rmtree(d)
    man = TraceManifest()
    man.CopyFrom(m)
    del man.artifacts[:]
    with trace_io.TraceWriter(d, encoding) as tw:
        for r in wl:
            tw.write_workload(r)
        for r in oc:
            tw.write_outcome(r)
        tw.finalize(man)


def reseal(d: Path, count_lines: bool = True) -> None:
    """Recompute the manifest's sha256 / size (and, for JSONL, record count) of every artifact."""
    m = trace_io.read_message_json(d / "manifest.json", TraceManifest)
    for a in m.artifacts:
        p = d / a.path
        if p.is_file():
            a.sha256, a.size_bytes = trace_io.sha256_file(p)
            if count_lines and a.encoding == 1:
                a.record_count = p.read_bytes().count(b"\n")
    trace_io.write_message_json(d / "manifest.json", m)


# ---------------------------------------------------------------------------------------------
# mutations: (class, name, breaks_a_rule, function(dir, seed, rng))


def _artifact(d: Path, rng: random.Random) -> Path:
    names = sorted(p.name for p in d.iterdir() if p.name.startswith(("workload.", "outcomes.")))
    if not names:
        raise NotApplicable
    return d / rng.choice(names)


def _bytes_edit(kind: str, sealed: bool):
    def f(d: Path, seed: Seed, rng: random.Random) -> None:
        p = _artifact(d, rng)
        b = bytearray(p.read_bytes())
        if not b:
            raise NotApplicable
        i = rng.randrange(len(b))
        if kind == "flip":
            b[i] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == "delete":
            del b[i:i + rng.randint(1, 8)]
        elif kind == "truncate":
            del b[i:]
        p.write_bytes(bytes(b))
        if sealed:
            reseal(d)
    return f


def _line_edit(edit: Callable[[dict, str, random.Random], str | None]):
    """Rewrite one JSONL workload/outcome line; ``edit(inner, kind, rng)`` returns the new text."""
    def f(d: Path, seed: Seed, rng: random.Random) -> None:
        if seed.encoding != "jsonl":
            raise NotApplicable
        p = _artifact(d, rng)
        lines = p.read_bytes().decode().splitlines(keepends=True)
        if not lines:
            raise NotApplicable
        i = rng.randrange(len(lines))
        rec = json.loads(lines[i])
        kind = next(iter(rec))
        new = edit(rec[kind], kind, rng)
        if new is None:
            raise NotApplicable
        lines[i] = new if new.endswith("\n") else new + "\n"
        p.write_bytes("".join(lines).encode())
        reseal(d)
    return f


def _wrap(kind: str, inner: dict, extra: str = "") -> str:
    body = json.dumps(inner, separators=(",", ":"))
    if extra:
        body = body[:-1] + ("," if len(body) > 2 else "") + extra + "}"
    return '{"%s":%s}' % (kind, body)


def _dup_key(inner, kind, rng):
    if not inner:
        return None
    k = rng.choice(list(inner))
    return _wrap(kind, inner, f'"{k}":{json.dumps(inner[k])}')


def _token(tok: str):
    def e(inner, kind, rng):
        nums = [k for k, v in inner.items() if isinstance(v, int) and not isinstance(v, bool)]
        if not nums:
            return None
        k = rng.choice(nums)
        rest = {x: v for x, v in inner.items() if x != k}
        return _wrap(kind, rest, f'"{k}":{tok}')
    return e


def _deep(inner, kind, rng):
    n = rng.choice([2_000, 50_000])
    return '{"%s":' % kind + "[" * n + "]" * n + "}"


def _wrong_type(inner, kind, rng):
    if not inner:
        return None
    k = rng.choice(list(inner))
    v = inner[k]
    inner[k] = [v] if not isinstance(v, list) else {"x": v}
    return _wrap(kind, inner)


def _enum99(inner, kind, rng):
    if kind != "request" or "finish_reasons" not in inner:
        return None
    inner["finish_reasons"] = [99] + inner["finish_reasons"][1:]
    return _wrap(kind, inner)


def _ctl_id(inner, kind, rng):
    ids = [k for k in inner if k.endswith("_id") and isinstance(inner[k], str) and inner[k]]
    if not ids:
        return None
    k = rng.choice(ids)
    inner[k] = inner[k] + rng.choice(["\u0001", "\n", "\u007f", "\u0085"])
    return _wrap(kind, inner)


def _drop_key(inner, kind, rng):
    if not inner:
        return None
    inner.pop(rng.choice(list(inner)))
    return _wrap(kind, inner)


def _cut(inner, kind, rng):
    s = _wrap(kind, inner)
    return s[: rng.randrange(1, len(s) - 1)]


def _blank(inner, kind, rng):
    return "\n" + _wrap(kind, inner)


def _records(edit: Callable[[TraceManifest, list, list, random.Random], None]):
    def f(d: Path, seed: Seed, rng: random.Random) -> None:
        m, wl, oc = load(d)
        edit(m, wl, oc, rng)
        rewrite(d, m, wl, oc, seed.encoding)
    return f


def _reqs(wl):
    return [r.request for r in wl if r.WhichOneof("record") == "request"]


def _pick(items, rng):
    if not items:
        raise NotApplicable
    return rng.choice(items)


def _cycle(m, wl, oc, rng):
    r = _pick([r for r in _reqs(wl) if r.dependencies], rng)
    pred = next((q for q in _reqs(wl) if q.request_id == r.dependencies[0].predecessor_request_id), None)
    if pred is None:
        raise NotApplicable
    pred.ClearField("arrival")
    d = pred.dependencies.add()
    d.CopyFrom(r.dependencies[0])
    d.predecessor_request_id = r.request_id
    pred.arrival.after_dependencies.SetInParent()


def _group_two_batches(m, wl, oc, rng):
    g = _pick([r.group for r in wl if r.WhichOneof("record") == "group"], rng)
    others = [r.rollout_batch for r in wl if r.WhichOneof("record") == "rollout_batch"
              and r.rollout_batch.rollout_batch_id != g.rollout_batch_id]
    if others:
        rng.choice(others).group_ids.append(g.group_id)
    else:
        wl.append(w.WorkloadRecord(rollout_batch=w.RolloutBatch(
            rollout_batch_id="fuzz-b2", group_ids=[g.group_id], readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS)))


def _move_request_batch(m, wl, oc, rng):
    r = _pick([r for r in _reqs(wl) if r.group_id and r.rollout_batch_id], rng)
    r.rollout_batch_id = r.rollout_batch_id + "-other"


def _set_output(value):
    def e(m, wl, oc, rng):
        r = _pick([r for r in _reqs(wl) if r.output_tokens], rng)
        v = value(m, r)
        if v is None:
            raise NotApplicable
        r.output_tokens[rng.randrange(len(r.output_tokens))] = v
    return e


def _over_model_len(m, r):
    e = next((x for x in m.engines if x.engine_id == r.engine_id), None)
    if e is None or not e.max_model_len:
        return None
    return min(e.max_model_len + 1, (1 << 32) - 1)


def _engine(field_name, value, extra=None):
    def e(m, wl, oc, rng):
        if not m.engines:
            raise NotApplicable
        eng = rng.choice(m.engines)
        longest = max((r.input_tokens + max(r.output_tokens, default=0) for r in _reqs(wl)
                       if r.engine_id == eng.engine_id), default=0)
        if field_name == "num_kv_blocks" and longest <= eng.block_size_tokens:
            raise NotApplicable
        if field_name == "max_num_batched_tokens" and max((r.input_tokens for r in _reqs(wl)
                                                           if r.engine_id == eng.engine_id), default=0) <= 1:
            raise NotApplicable
        setattr(eng, field_name, value)
        if extra:
            extra(eng)
    return e


def _dup_request(m, wl, oc, rng):
    r = _pick(_reqs(wl), rng)
    wl.append(w.WorkloadRecord(request=r))


def _req_field(fn):
    def e(m, wl, oc, rng):
        fn(_pick(_reqs(wl), rng))
    return e


def _neg_time(m, wl, oc, rng):
    r = _pick([r for r in _reqs(wl) if r.arrival.WhichOneof("kind") == "observed_offset_ns"], rng)
    r.arrival.observed_offset_ns = -1


def _no_arrival(m, wl, oc, rng):
    r = _pick([r for r in _reqs(wl) if r.HasField("arrival")], rng)
    r.ClearField("arrival")


def _missing_time(m, wl, oc, rng):
    out = _pick([x.request for x in oc if x.WhichOneof("record") == "request" and x.request.HasField("completion_ns")],
                rng)
    out.ClearField("completion_ns")
    out.unavailable_reason = ""


def _group_early(m, wl, oc, rng):
    done = {x.request.request_id: x.request.completion_ns for x in oc
            if x.WhichOneof("record") == "request" and x.request.HasField("completion_ns")}
    members = defaultdict(list)
    for r in _reqs(wl):
        if r.group_id and r.request_id in done:
            members[r.group_id].append(done[r.request_id])
    gs = [x.group for x in oc if x.WhichOneof("record") == "group" and x.group.group_id in members
          and max(members[x.group.group_id]) > 0]
    g = _pick(gs, rng)
    g.completed_ns = max(members[g.group_id]) - 1


def _unknown_sample(m, wl, oc, rng):
    out = _pick([x.request for x in oc if x.WhichOneof("record") == "request"], rng)
    out.samples.add(sample_id="fuzz-ghost-sample", first_token_ns=out.first_token_ns or 0,
                    completion_ns=out.completion_ns or 0)


def _request_other_group(m, wl, oc, rng):
    groups = [r.group.group_id for r in wl if r.WhichOneof("record") == "group"]
    if len(set(groups)) < 2:
        raise NotApplicable
    r = _pick([r for r in _reqs(wl) if r.group_id], rng)
    r.group_id = rng.choice([g for g in groups if g != r.group_id])


def _batches(wl):
    return [r.rollout_batch for r in wl if r.WhichOneof("record") == "rollout_batch"]


def _after_batch(kind: str):
    """A rollout batch's after_batch (the driver's closed-loop boundary) made wrong: naming no batch,
    the batch itself, nothing (present, empty), with a negative gap, or two batches waiting for each other."""
    def e(m, wl, oc, rng):
        bs = _batches(wl)
        b = _pick(bs, rng)
        others = [x for x in bs if x.rollout_batch_id != b.rollout_batch_id]
        ab = b.after_batch
        if kind == "unknown":
            ab.previous_rollout_batch_id = "fuzz-ghost-batch"
        elif kind == "self":
            ab.previous_rollout_batch_id = b.rollout_batch_id
        elif kind == "empty":
            ab.previous_rollout_batch_id = ""
            b.after_batch.SetInParent()
        elif kind == "negative_gap":
            if not ab.previous_rollout_batch_id:
                ab.previous_rollout_batch_id = rng.choice(others).rollout_batch_id if others else "fuzz-ghost-batch"
            ab.driver_gap_ns = -rng.randint(1, 10**9)
        elif kind == "cycle":
            c = _pick(others, rng)
            ab.previous_rollout_batch_id = c.rollout_batch_id
            c.after_batch.previous_rollout_batch_id = b.rollout_batch_id
    return e


def _submit_before_previous_ready(m, wl, oc, rng):
    """A request of a batch with after_batch measured as submitted before the previous batch was ready."""
    ready = {x.rollout_batch.rollout_batch_id: x.rollout_batch.ready_ns for x in oc
             if x.WhichOneof("record") == "rollout_batch" and x.rollout_batch.HasField("ready_ns")}
    prev = {b.rollout_batch_id: b.after_batch.previous_rollout_batch_id for b in _batches(wl)
            if b.HasField("after_batch") and ready.get(b.after_batch.previous_rollout_batch_id, 0) > 0}
    group_batch = {r.group.group_id: r.group.rollout_batch_id for r in wl if r.WhichOneof("record") == "group"}
    batch_of = {r.request_id: group_batch.get(r.group_id) for r in _reqs(wl) if r.group_id}
    outs = [x.request for x in oc if x.WhichOneof("record") == "request" and x.request.HasField("submit_ns")
            and batch_of.get(x.request.request_id) in prev]
    out = _pick(outs, rng)
    out.submit_ns = ready[prev[batch_of[out.request_id]]] - 1


def _chain_batches(m, wl, oc, rng):
    """Every rollout batch after the one before it in the workload (gap 0): closed loop, which the
    measured times may or may not bear out (outcome.batch_boundary)."""
    bs = _batches(wl)
    if len(bs) < 2:
        raise NotApplicable
    for a, b in zip(bs, bs[1:]):
        b.after_batch.previous_rollout_batch_id = a.rollout_batch_id
        b.after_batch.driver_gap_ns = 0


def _manifest_field(fn):
    def e(m, wl, oc, rng):
        fn(m)
    return e


# neutral semantic edits (may or may not break a rule: only crash-checked)
def _halve_outputs(m, wl, oc, rng):
    for r in _reqs(wl):
        for i, v in enumerate(r.output_tokens):
            r.output_tokens[i] = max(1, v // 2)


def _simultaneous(m, wl, oc, rng):
    obs = [r for r in _reqs(wl) if r.arrival.WhichOneof("kind") == "observed_offset_ns"]
    if len(obs) < 2:
        raise NotApplicable
    t = min(r.arrival.observed_offset_ns for r in obs)
    for r in obs:
        r.arrival.observed_offset_ns = t


def _shuffle(m, wl, oc, rng):
    rng.shuffle(wl)
    rng.shuffle(oc)


def _longer_waits(m, wl, oc, rng):
    for r in _reqs(wl):
        for d in r.dependencies:
            if d.HasField("external_delay_ns"):
                d.external_delay_ns = d.external_delay_ns * 2 + 1


def _manifest_text(edit: Callable[[str, random.Random], str | None]):
    def f(d: Path, seed: Seed, rng: random.Random) -> None:
        p = d / "manifest.json"
        new = edit(p.read_text(), rng)
        if new is None:
            raise NotApplicable
        p.write_text(new)
    return f


def _manifest_json(edit: Callable[[dict, random.Random], None]):
    def t(text, rng):
        doc = json.loads(text)
        if edit(doc, rng) is False:
            return None
        return json.dumps(doc, indent=2)
    return _manifest_text(t)


def _art(doc, rng):
    return rng.choice(doc["artifacts"])


def _off_by(key: str, delta: int):
    """One artifact's ``key`` (record_count / size_bytes) changed by ``delta``: the artifact is drawn
    once (drawing it again for the old value could pick the other one and write back the value the
    edited artifact already had: a mutant that breaks nothing, counted as a silent accept)."""
    def edit(doc, rng):
        a = _art(doc, rng)
        a[key] = str(int(a.get(key, 0)) + delta)
    return edit


def _fs(kind: str):
    def f(d: Path, seed: Seed, rng: random.Random) -> None:
        if kind == "manifest_missing":
            (d / "manifest.json").unlink()
            return
        if kind == "partial_left":
            (d / rng.choice(["workload.jsonl.partial", trace_io.WRITER_LOCK])).write_bytes(b"")
            return
        target = d / "manifest.json" if kind == "manifest_symlink" else _artifact(d, rng)
        keep = d.parent / f".{d.name}.{target.name}.orig"
        shutil.move(target, keep)
        if kind in ("symlink", "manifest_symlink"):
            target.symlink_to(keep)
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "directory":
            target.mkdir()
    return f


def _deep_manifest(text, rng):
    return '{"trace_id": ' + "[" * 20_000 + "]" * 20_000 + "}"


MUTATIONS: list[tuple[str, str, bool, Callable]] = [
    # byte level
    ("byte", "flip_stale", True, _bytes_edit("flip", False)),
    ("byte", "truncate_stale", True, _bytes_edit("truncate", False)),
    ("byte", "flip_sealed", False, _bytes_edit("flip", True)),
    ("byte", "insert_sealed", False, _bytes_edit("insert", True)),
    ("byte", "delete_sealed", False, _bytes_edit("delete", True)),
    ("byte", "truncate_sealed", False, _bytes_edit("truncate", True)),
    # JSON level (JSONL seeds)
    ("json", "duplicate_key", True, _line_edit(_dup_key)),
    ("json", "nan", True, _line_edit(_token("NaN"))),
    ("json", "infinity", True, _line_edit(_token("-Infinity"))),
    ("json", "huge_int", True, _line_edit(_token("9" * 5000))),
    ("json", "overflow_float", True, _line_edit(_token("1e999"))),
    ("json", "deep", True, _line_edit(_deep)),
    ("json", "wrong_type", True, _line_edit(_wrong_type)),
    ("json", "enum_number_99", True, _line_edit(_enum99)),
    ("json", "control_char_id", True, _line_edit(_ctl_id)),
    ("json", "cut_line", True, _line_edit(_cut)),
    ("json", "blank_line", True, _line_edit(_blank)),
    ("json", "drop_key", False, _line_edit(_drop_key)),
    # semantic (through the messages and TraceWriter)
    ("semantic", "dependency_cycle", True, _records(_cycle)),
    ("semantic", "group_in_two_batches", True, _records(_group_two_batches)),
    ("semantic", "request_batch_disagrees", True, _records(_move_request_batch)),
    ("semantic", "request_group_disagrees", True, _records(_request_other_group)),
    ("semantic", "output_4e9", True, _records(_set_output(lambda m, r: 4_000_000_000))),
    ("semantic", "over_max_model_len", True, _records(_set_output(_over_model_len))),
    ("semantic", "kv_blocks_1", True, _records(_engine("num_kv_blocks", 1))),
    ("semantic", "batch_tokens_1", True, _records(_engine("max_num_batched_tokens", 1,
                                                          lambda e: setattr(e, "enable_chunked_prefill", False)))),
    ("semantic", "duplicate_request", True, _records(_dup_request)),
    ("semantic", "empty_request_id", True, _records(_req_field(lambda r: setattr(r, "request_id", "")))),
    ("semantic", "control_char_request_id", True,
     _records(_req_field(lambda r: setattr(r, "request_id", r.request_id + "\x1b[31m")))),
    ("semantic", "unknown_engine", True, _records(_req_field(lambda r: setattr(r, "engine_id", "fuzz-ghost")))),
    ("semantic", "num_samples_off", True, _records(_req_field(lambda r: setattr(r, "num_samples", r.num_samples + 1)))),
    ("semantic", "num_samples_huge", True, _records(_req_field(lambda r: setattr(r, "num_samples", 1 << 30)))),
    ("semantic", "unknown_finish_reason", True, _records(_req_field(lambda r: r.finish_reasons.append(77)))),
    ("semantic", "negative_arrival", True, _records(_neg_time)),
    ("semantic", "missing_arrival", True, _records(_no_arrival)),
    ("semantic", "time_missing_no_reason", True, _records(_missing_time)),
    ("semantic", "group_completed_early", True, _records(_group_early)),
    ("semantic", "unknown_sample_timing", True, _records(_unknown_sample)),
    ("semantic", "empty_trace_id", True, _records(_manifest_field(lambda m: setattr(m, "trace_id", "")))),
    ("semantic", "after_batch_unknown", True, _records(_after_batch("unknown"))),
    ("semantic", "after_batch_self", True, _records(_after_batch("self"))),
    ("semantic", "after_batch_empty", True, _records(_after_batch("empty"))),
    ("semantic", "after_batch_negative_gap", True, _records(_after_batch("negative_gap"))),
    ("semantic", "after_batch_cycle", True, _records(_after_batch("cycle"))),
    ("semantic", "submit_before_previous_ready", True, _records(_submit_before_previous_ready)),
    ("semantic", "halved_outputs", False, _records(_halve_outputs)),
    ("semantic", "batches_chained", False, _records(_chain_batches)),
    ("semantic", "simultaneous_arrivals", False, _records(_simultaneous)),
    ("semantic", "shuffled_records", False, _records(_shuffle)),
    ("semantic", "longer_waits", False, _records(_longer_waits)),
    # manifest level
    ("manifest", "schema_version_twice", True, _manifest_text(
        lambda s, r: s.replace('"schema_version": "unirl_replay.v1"',
                               '"schema_version": "unirl_replay.v2", "schema_version": "unirl_replay.v1"', 1))),
    ("manifest", "schema_version_v2", True, _manifest_json(lambda d, r: d.update(schema_version="unirl_replay.v2"))),
    ("manifest", "path_escapes", True, _manifest_json(
        lambda d, r: _art(d, r).update(path=r.choice(["../outcomes.jsonl", "/etc/passwd", "./workload.jsonl",
                                                       "workload.jsonl/../workload.jsonl"])))),
    ("manifest", "artifact_dropped", True, _manifest_json(lambda d, r: d["artifacts"].pop(r.randrange(2)))),
    ("manifest", "encoding_99", True, _manifest_json(lambda d, r: _art(d, r).update(encoding=99))),
    ("manifest", "record_count_off", True, _manifest_json(_off_by("record_count", 1))),
    ("manifest", "size_off", True, _manifest_json(_off_by("size_bytes", 7))),
    ("manifest", "window_zero", True, _manifest_json(lambda d, r: d["window"].pop("duration_ns", None))),
    ("manifest", "clock_domain_99", True, _manifest_json(lambda d, r: d["window"].update(clock_domain=99))),
    ("manifest", "max_model_len_1", True, _manifest_json(
        lambda d, r: [e.update(max_model_len=1) for e in d["engines"]] and None)),
    ("manifest", "deep", True, _manifest_text(_deep_manifest)),
    ("manifest", "nan", True, _manifest_text(lambda s, r: s.replace('"tp_size": 1', '"tp_size": NaN', 1)
                                             if '"tp_size": 1' in s else None)),
    # filesystem level
    ("filesystem", "artifact_symlink", True, _fs("symlink")),
    ("filesystem", "manifest_symlink", True, _fs("manifest_symlink")),
    ("filesystem", "artifact_fifo", True, _fs("fifo")),
    ("filesystem", "artifact_directory", True, _fs("directory")),
    ("filesystem", "manifest_missing", True, _fs("manifest_missing")),
    ("filesystem", "partial_left", True, _fs("partial_left")),
]


CLASSES = tuple(dict.fromkeys(m[0] for m in MUTATIONS))

# ---------------------------------------------------------------------------------------------
# the stages


@dataclass
class Tally:
    mutants: Counter = field(default_factory=Counter)            # class -> count
    by_mutation: Counter = field(default_factory=Counter)        # (class, name) -> count
    outcome: Counter = field(default_factory=Counter)            # (class, stage, outcome) -> count
    failures: list = field(default_factory=list)                 # (class, name, seed, stage, what)

    def add(self, cls, stage, what):
        self.outcome[(cls, stage, what)] += 1


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        yield err


def _run(tally: Tally, cls: str, name: str, seed: str, stage: str, fn: Callable[[], object]):
    """Run one stage; a typed error of the package is an answer, anything else a crash."""
    try:
        r = fn()
        tally.add(cls, stage, "ok")
        return True, r
    except TraceRejectedError:
        tally.add(cls, stage, "refused")
        return False, None
    except UnirlReplayError as e:
        tally.add(cls, stage, "typed_error")
        return False, e
    except Exception:  # noqa: BLE001 - the fuzzer's job: no other exception may escape
        tally.add(cls, stage, "CRASH")
        tally.failures.append((cls, name, seed, stage, traceback.format_exc(limit=6)))
        return False, None


def _cli(tally: Tally, cls: str, name: str, seed: str, stage: str, argv: list[str], allowed: set[int]) -> int | None:
    with _quiet() as err:
        try:
            rc = cli_main(argv)
        except BaseException:  # noqa: BLE001
            rc = None
            tb = traceback.format_exc(limit=6)
    if rc is None or rc not in allowed or "Traceback" in err.getvalue():
        tally.add(cls, stage, "CRASH")
        tally.failures.append((cls, name, seed, stage, f"exit {rc}; {err.getvalue()[-600:]}"
                               + (tb if rc is None else "")))
        return None
    tally.add(cls, stage, f"exit_{rc}")
    return rc


def run_stages(tally: Tally, cls: str, name: str, breaks: bool, seed: str, d: Path, tmp: Path,
               replay: bool = True, dynamo: bool = True) -> None:
    ok, res = _run(tally, cls, name, seed, "validate", lambda: check_trace(d))
    if not ok:
        return
    valid = res.status == VALID
    rc = _cli(tally, cls, name, seed, "validate_cli", ["validate", str(d)], VALIDATE_EXITS)
    if rc is not None and (rc == 0) != valid:
        tally.failures.append((cls, name, seed, "validate_cli", f"exit {rc} but status {res.status}"))
    if breaks and valid:
        tally.add(cls, "validate", "SILENT_ACCEPT")
        tally.failures.append((cls, name, seed, "validate", "a mutation that breaks a rule was accepted"))
    passed = {}
    for stage in ("replay", "compare"):
        passed[stage], _ = _run(tally, cls, name, seed, f"gate_{stage}", lambda s=stage: gate(d, s))
    if passed["compare"] != valid:
        tally.failures.append((cls, name, seed, "gate_compare", f"gate {passed['compare']} but validate {valid}"))
    if breaks and passed["compare"]:
        tally.add(cls, "gate_compare", "SILENT_ACCEPT")
    if not passed["replay"]:
        _cli(tally, cls, name, seed, "convert_cli", ["convert", str(d), "--out", str(tmp / "c" / "x.jsonl")],
             COMMAND_EXITS)
        return
    from unirl_replay.replay.runner import convert_trace, replay_trace, write_result
    for fmt in ("agentic_mooncake", "mooncake"):
        _run(tally, cls, name, seed, f"convert_{fmt}",
             lambda f=fmt: convert_trace(d, tmp / f"conv-{f}" / "in.jsonl", trace_format=f, unmodelled=ALLOW))
    if not (replay and dynamo):
        return
    ok, result = _run(tally, cls, name, seed, "replay",
                      lambda: replay_trace(d, "fixed:10,1", work_dir=tmp / "rep" / "upstream", unmodelled=ALLOW))
    if not ok or not passed["compare"]:
        return
    write_result(tmp / "rep", result)
    from unirl_replay.report.outputs import compare_to_dir
    _run(tally, cls, name, seed, "compare",
         lambda: compare_to_dir(d, tmp / "rep" / "replay_result.json", tmp / "cmp", plots_too=False))


# result mutations: a replay result of an accepted seed, JSON-mutated, given to compare
def _result_mutations():
    return [
        ("duplicate_key", lambda s, r: s.replace('"schema_version": "unirl_replay.v1"',
                                                 '"schema_version": "x", "schema_version": "unirl_replay.v1"', 1)),
        ("granularity_99", lambda s, r: s.replace('"granularity": "RESULT_GRANULARITY_PER_REQUEST"', '"granularity": 99')),
        ("nan", lambda s, r: s.replace('"simulator_wall_ns": "', '"simulator_wall_ns": NaN, "x_": "', 1)),
        ("huge", lambda s, r: s.replace('"makespan_ns": "', '"makespan_ns": ' + "9" * 5000 + ', "x_": "', 1)),
        ("deep", lambda s, r: "[" * 30_000),
        ("truncated", lambda s, r: s[: r.randrange(1, len(s))]),
        ("flip", lambda s, r: (lambda i: s[:i] + chr((ord(s[i]) + 1) % 128) + s[i + 1:])(r.randrange(len(s)))),
        ("drop_requests", lambda s, r: json.dumps({k: v for k, v in json.loads(s).items() if k != "requests"})),
        ("ctl_id", lambda s, r: s.replace('"request_id": "', '"request_id": "\\u0007', 1)),
        ("wrong_type", lambda s, r: s.replace('"requests": [', '"requests": {"a": [', 1).replace("]", "]}", 1)),
    ]


def run_result_mutant(tally: Tally, seed: Seed, result_text: str, rng: random.Random, tmp: Path) -> None:
    name, fn = rng.choice(_result_mutations())
    tally.mutants["result"] += 1
    tally.by_mutation[("result", name)] += 1
    (tmp / "r.json").write_text(fn(result_text, rng))
    _cli(tally, "result", name, seed.name, "compare_cli",
         ["compare", str(seed.dir), str(tmp / "r.json"), "--out", str(tmp / "cmp"), "--no-plots"], COMMAND_EXITS)


def fuzz(n: int, seed: int = 13, work: Path | None = None, replay_every: int = 1, log=None) -> Tally:
    """Run ``n`` mutants (seeded); returns the tally. ``replay_every``: replay every k-th accepted mutant."""
    rng = random.Random(seed)
    tally = Tally()
    try:
        import dynamo.replay  # noqa: F401
        dynamo = True
    except ImportError:
        dynamo = False
    with tempfile.TemporaryDirectory(prefix="unirl-fuzz-") as tmpd:
        root = Path(work or tmpd)
        pool = seeds(root)
        results: dict[str, str] = {}
        accepted = 0
        t0 = time.perf_counter()
        for i in range(n):
            s = rng.choice(pool)
            mdir = root / f"m{i}"
            tmp = root / f"s{i}"
            tmp.mkdir(parents=True)
            if dynamo and i % 12 == 11:  # a result mutant
                if s.name not in results:
                    from unirl_replay.replay.runner import replay_trace
                    try:
                        with _quiet():
                            results[s.name] = json_profile.to_json(replay_trace(s.dir, "fixed:10,1", unmodelled=ALLOW))
                    except UnirlReplayError:  # a seed upstream cannot express: no result to mutate
                        results[s.name] = ""
                if results[s.name]:
                    run_result_mutant(tally, s, results[s.name], rng, tmp)
                    shutil.rmtree(tmp, ignore_errors=True)
                    continue
            for _ in range(50):
                want = rng.choice(CLASSES)  # classes equally likely, then a mutation of the class
                cls, name, breaks, fn = rng.choice([m for m in MUTATIONS if m[0] == want])
                shutil.rmtree(mdir, ignore_errors=True)
                shutil.copytree(s.dir, mdir, symlinks=True)
                try:
                    fn(mdir, s, rng)
                    break
                except NotApplicable:
                    continue
            else:
                continue
            tally.mutants[cls] += 1
            tally.by_mutation[(cls, name)] += 1
            accepted_before = tally.outcome[(cls, "gate_replay", "ok")]
            with _quiet():
                run_stages(tally, cls, name, breaks, s.name, mdir, tmp,
                           replay=(accepted % replay_every == 0), dynamo=dynamo)
            if tally.outcome[(cls, "gate_replay", "ok")] > accepted_before:
                accepted += 1
            for p in (mdir, tmp):
                shutil.rmtree(p, ignore_errors=True)
            for p in root.glob(f".m{i}.*"):
                p.unlink(missing_ok=True)
            if log and (i + 1) % 200 == 0:
                log(f"{i + 1}/{n} mutants, {len(tally.failures)} failures, {time.perf_counter() - t0:.0f} s")
    return tally


def report(t: Tally) -> str:
    lines = [f"mutants: {sum(t.mutants.values())} ({', '.join(f'{k} {v}' for k, v in sorted(t.mutants.items()))})",
             f"failures: {len(t.failures)} (crashes {sum(v for k, v in t.outcome.items() if k[2] == 'CRASH')}, "
             f"silent accepts {sum(v for k, v in t.outcome.items() if k[2] == 'SILENT_ACCEPT')})", "",
             "per class and stage (outcome: count):"]
    stages = sorted({(c, s) for c, s, _ in t.outcome})
    for c, s in stages:
        outs = {o: v for (c2, s2, o), v in t.outcome.items() if (c2, s2) == (c, s)}
        lines.append(f"  {c:<10} {s:<24} " + ", ".join(f"{o} {v}" for o, v in sorted(outs.items())))
    lines += ["", "per mutation:"] + [f"  {c:<10} {n:<28} {v}" for (c, n), v in sorted(t.by_mutation.items())]
    for f in t.failures[:20]:
        lines += ["", f"FAIL {f[0]}/{f[1]} on {f[2]} at {f[3]}:", f[4]]
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="unirl-replay mutation fuzzer (issue 13)")
    ap.add_argument("--mutants", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--json", default=None, help="also write the counts here")
    a = ap.parse_args()
    t0 = time.perf_counter()
    tally = fuzz(a.mutants, a.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(report(tally))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "mutants": dict(tally.mutants), "by_mutation": {f"{c}/{n}": v for (c, n), v in tally.by_mutation.items()},
            "outcomes": {f"{c}/{s}/{o}": v for (c, s, o), v in tally.outcome.items()},
            "failures": [list(f) for f in tally.failures]}, indent=2))
    sys.exit(1 if tally.failures else 0)
