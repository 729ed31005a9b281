"""The grid spec: a small YAML or JSON file expanded into independent jobs.

```yaml
traces:                          # paths are relative to the spec file
  - path: ../traces/grpo-a
  - path: ../traces/agentic-a
    allow_unmodelled: [engine_client.inflight_limit]
    repeats: []                  # other runs of the same window (compare --repeat)
simulators: [dynamo]             # dynamo | aisimulate[==VERSION]; default [dynamo]
timing_models:
  - polynomial                   # name = the spec with ':' '/' ',' made safe
  - {name: fixed, spec: "fixed:10,1"}
format: agentic_mooncake         # or mooncake
compare: true                    # compare each replay with the measured outcomes
plots: true                      # PNG plots + Perfetto timeline; each trace's default (per trace: `plots: false`)
layout: "{trace}/{simulator}/{timing_model}"   # each job's directory under the output dir
conformance:                     # optional: the conformance corpus as jobs (revision x shard)
  corpus: ../conformance
  revisions: [ai-dynamo==1.6.1]  # default: the installed revision
  shards: 2                      # split each revision's cases into this many jobs
```

Each (trace, simulator, timing model) is one replay job (replay, then compare, into its own
directory); each (revision, shard) is one conformance job. Jobs are numbered in spec order; the
driver reports them in that order whatever order they finish in.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import TraceFormatError

LAYOUT = "{trace}/{simulator}/{timing_model}"
TOP_KEYS = {"traces", "simulators", "timing_models", "format", "compare", "plots", "layout", "keep_upstream",
            "conformance", "out"}
TRACE_KEYS = {"path", "name", "allow_unmodelled", "repeats", "plots", "batch"}
CONFORMANCE_KEYS = {"corpus", "revisions", "cases", "shards", "cache_dir"}
FORMATS = ("agentic_mooncake", "mooncake")


class GridSpecError(TraceFormatError):
    """The grid spec file is malformed; names the file and the rule (``grid.spec.*``)."""


@dataclass(frozen=True)
class TraceEntry:
    name: str
    path: str                        # absolute
    allow_unmodelled: tuple[str, ...] = ()
    repeats: tuple[str, ...] = ()    # absolute
    plots: bool = True
    batch: str | None = None


@dataclass(frozen=True)
class ModelEntry:
    name: str
    spec: str                        # profile paths made absolute


@dataclass(frozen=True)
class ReplayJob:
    """Replay one trace with one simulator and timing model, then compare; into ``job_id/``."""

    index: int
    job_id: str                      # relative directory under the grid output
    trace: TraceEntry
    simulator: str
    timing_model: ModelEntry
    trace_format: str = "agentic_mooncake"
    compare: bool = True
    keep_upstream: bool = True
    kind: str = "replay"


@dataclass(frozen=True)
class ConformanceJob:
    """Run some conformance cases on one simulator revision (one executor process)."""

    index: int
    job_id: str
    corpus: str                      # absolute
    revision: str
    cases: tuple[str, ...]
    cache_dir: str
    kind: str = "conformance"


@dataclass
class ConformanceSpec:
    corpus: str
    revisions: list[str]
    cases: list[str] | None
    shards: int
    cache_dir: str


@dataclass
class GridSpec:
    path: str
    traces: list[TraceEntry]
    simulators: list[str]
    timing_models: list[ModelEntry]
    trace_format: str = "agentic_mooncake"
    compare: bool = True
    layout: str = LAYOUT
    keep_upstream: bool = True
    out: str | None = None
    conformance: ConformanceSpec | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def safe_name(text: str) -> str:
    """A directory-name-safe form of a spec (``fixed:10,1`` -> ``fixed-10-1``)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-.") or "x"


def simulator_tag(spec: str) -> str:
    return spec.replace("==", "-")


def _err(path: Path, msg: str, rule: str) -> GridSpecError:
    return GridSpecError(msg, file=str(path), rule=f"grid.spec.{rule}")


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise _err(path, "grid spec file not found", "missing")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise _err(path, f"not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}): a spec is YAML or "
                   "JSON text in UTF-8", "parse") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:  # pragma: no cover - pyyaml comes with the grid extra
            raise _err(path, "a YAML spec needs PyYAML (`uv sync --extra grid`); or write the spec as JSON",
                       "yaml_missing") from None
        try:
            data = yaml.load(text, Loader=_unique_keys_loader(yaml))  # safe_load, duplicate keys refused
        except yaml.YAMLError as e:
            line = getattr(getattr(e, "problem_mark", None), "line", -1) + 1
            raise GridSpecError(f"not valid YAML: {getattr(e, 'problem', e)}", file=str(path), line=max(line, 0),
                                rule="grid.spec.parse") from None
        except RecursionError:  # hostile input: nesting PyYAML's recursive parser cannot follow
            raise _err(path, "YAML nested too deeply (beyond the interpreter's recursion limit)", "parse") from None
    else:
        from unirl_replay.contract import json_guard
        from unirl_replay.contract.errors import TraceFormatError

        try:  # the contract's hostile-JSON guard: duplicate keys, NaN, huge numbers are errors, not last-one-wins
            data = json_guard.loads(text, file=str(path))
        except TraceFormatError as e:  # its own words, without its file and rule again
            words = str(e).split(f"[{e.rule}]: ", 1)[-1] if e.rule else str(e)
            if not words.startswith("not valid JSON"):
                words = f"not valid JSON: {words}"
            if path.suffix.lower() != ".json":
                words += " (a spec not named *.yaml / *.yml is read as JSON)"
            raise GridSpecError(words, file=str(path), line=e.line, rule="grid.spec.parse") from None
    if not isinstance(data, dict):
        raise _err(path, "the spec must be a mapping (traces, timing_models, ...)", "shape")
    return data


def _unique_keys_loader(yaml):
    """PyYAML's SafeLoader, except that a mapping with the same key twice is an error (PyYAML keeps the last)."""

    class UniqueKeys(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"found the key {key!r} twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeys


def _strs(path: Path, value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _err(path, f"{key} must be a list of non-empty strings, got {value!r}", "type")
    return list(value)


def _bool(path: Path, value: Any, key: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _err(path, f"{key} must be true or false, got {value!r}", "type")
    return value


def _check_simulator(path: Path, spec: str) -> None:
    from unirl_replay.replay.simulators import parse_simulator

    try:
        parse_simulator(spec)
    except Exception as e:  # noqa: BLE001 - SimulatorSpecError, re-raised naming the spec file
        raise _err(path, f"simulator {spec!r}: {e}", "simulator") from None


def _abs(base: Path, p: str, spec: Path) -> str:
    if any(ord(ch) < 32 for ch in p):  # a NUL was a ValueError traceback (embedded null byte) from resolve()
        raise _err(spec, f"path {p!r} holds a control character", "path")
    try:
        q = Path(p).expanduser()
    except RuntimeError:  # "~nouser/...": no such user's home (it was a RuntimeError traceback)
        raise _err(spec, f"path {p!r}: {p.split('/')[0]!r} names no user's home directory here", "path") from None
    return str((q if q.is_absolute() else base / q).resolve())


def _model(base: Path, path: Path, item: Any) -> ModelEntry:
    if isinstance(item, str):
        name, spec = None, item
    elif isinstance(item, dict) and set(item) <= {"name", "spec"} and isinstance(item.get("spec"), str):
        name, spec = item.get("name"), item["spec"]
    else:
        raise _err(path, f"a timing model is a spec string or {{name, spec}}, got {item!r}", "timing_model")
    kind, sep, arg = spec.partition(":")
    if kind == "profile" and arg:
        spec = f"profile:{_abs(base, arg, path)}"  # workers resolve nothing against their own cwd
        name = name or safe_name(Path(arg).stem)
    from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model

    try:  # a bad spec is a bad grid spec (exit 2), not one failed job per trace
        parse_timing_model(spec)
    except TimingModelError as e:
        raise _err(path, f"timing model {spec!r}: {e}", "timing_model") from None
    return ModelEntry(str(name) if name else safe_name(spec), spec)


def _trace(base: Path, path: Path, item: Any, plots: bool = True) -> TraceEntry:
    """One trace entry; ``plots``: the spec's top-level ``plots`` (the default of the trace's own)."""
    if isinstance(item, str):
        item = {"path": item}
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        raise _err(path, f"a trace is a path or {{path, name, allow_unmodelled, repeats, plots, batch}}, got {item!r}",
                   "trace")
    extra = set(item) - TRACE_KEYS
    if extra:
        raise _err(path, f"unknown trace keys {sorted(extra, key=str)}; allowed: {sorted(TRACE_KEYS)}", "unknown_key")
    p = _abs(base, item["path"], path)
    if not Path(p).is_dir():
        raise _err(path, f"trace directory {p} does not exist", "trace_missing")
    name = item.get("name") or Path(p).name
    if not isinstance(name, str) or ".." in Path(name).parts or Path(name).is_absolute():
        raise _err(path, f"trace name {name!r} must be a relative name without '..'", "trace_name")
    batch = item.get("batch")
    repeats = tuple(_abs(base, r, path) for r in _strs(path, item.get("repeats"), "repeats"))
    for r in repeats:  # as the trace's own path: a bad spec before anything runs, not one failed job per model
        if not Path(r).is_dir():
            raise _err(path, f"repeat trace directory {r} (of trace {name!r}) does not exist", "trace_missing")
    allow = tuple(_strs(path, item.get("allow_unmodelled"), "allow_unmodelled"))
    from unirl_replay.contract.errors import UnsupportedWorkloadError
    from unirl_replay.replay.support import check_unmodelled

    try:  # as a timing model's spec: a bad spec (exit 2), not every replay of the trace failing (exit 1)
        check_unmodelled(allow)
    except UnsupportedWorkloadError as e:
        raise _err(path, f"trace {name!r}: allow_unmodelled {list(allow)!r}: {e}", "allow_unmodelled") from None
    return TraceEntry(name, p, allow, repeats,
                      _bool(path, item.get("plots"), "plots", plots), None if batch is None else str(batch))


def load_spec(path: str | Path) -> GridSpec:
    """Read and check a grid spec; paths become absolute (relative ones are against the spec's folder).

    Raises:
        GridSpecError: unreadable file, unknown key, wrong type, missing trace directory,
            unknown simulator or format, duplicate names, nothing to run.
    """
    path = Path(path).resolve()
    data = _read(path)
    base = path.parent
    extra = set(data) - TOP_KEYS  # a YAML key may be a number: sorted as text (mixed types were a TypeError)
    if extra:
        raise _err(path, f"unknown keys {sorted(extra, key=str)}; allowed: {sorted(TOP_KEYS)}", "unknown_key")
    traces_raw = data.get("traces") or []
    if not isinstance(traces_raw, list):
        raise _err(path, "traces must be a list", "type")
    # the top-level `plots` is every trace's default (it was accepted and ignored: plots written all the same)
    plots = _bool(path, data.get("plots"), "plots", True)
    traces = [_trace(base, path, t, plots) for t in traces_raw]
    models_raw = data.get("timing_models") or []
    if not isinstance(models_raw, list):
        raise _err(path, "timing_models must be a list", "type")
    models = [_model(base, path, m) for m in models_raw]
    sims = _strs(path, data.get("simulators"), "simulators") or ["dynamo"]
    for s in sims:
        _check_simulator(path, s)
    fmt = data.get("format", "agentic_mooncake")
    if fmt not in FORMATS:
        raise _err(path, f"unknown format {fmt!r}; use one of {FORMATS}", "format")
    for what, names in (("trace", [t.name for t in traces]), ("timing model", [m.name for m in models]),
                        ("simulator", sims)):
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise _err(path, f"duplicate {what} names {dup}: give each a distinct `name`", "duplicate")
    if traces and not models:
        raise _err(path, "traces are given but no timing_models", "timing_models")
    layout = data.get("layout", LAYOUT)
    if not isinstance(layout, str) or "{trace}" not in layout or "{timing_model}" not in layout or \
            (len(sims) > 1 and "{simulator}" not in layout):
        raise _err(path, f"layout {layout!r} must contain {{trace}} and {{timing_model}} (and {{simulator}} when "
                   "there are several simulators)", "layout")
    try:
        # placeholders only: a format spec ({trace:>9999999999}: a MemoryError, 10 GB asked for), a conversion or
        # an attribute / index ({trace.__class__}: a directory "<class 'str'>") is no part of a job's directory
        odd = [f"{{{f}{'!' + c if c else ''}{':' + fs if fs else ''}}}" for _, f, fs, c in string.Formatter().parse(layout)
               if f is not None and (fs or c or not f.isidentifier())]
        if odd:
            raise _err(path, f"layout {layout!r}: {odd[0]} is not a plain placeholder ({{trace}}, {{simulator}}, "
                       "{timing_model}: no format spec, conversion, attribute or index)", "layout")
        layout.format(trace="t", simulator="s", timing_model="m")
    except (KeyError, IndexError, ValueError) as e:
        raise _err(path, f"layout {layout!r} is not a pattern of {{trace}}, {{simulator}} and {{timing_model}}: "
                   f"{type(e).__name__} {e}", "layout") from None
    conf = None
    if data.get("conformance") is not None:
        c = data["conformance"]
        if not isinstance(c, dict) or set(c) - CONFORMANCE_KEYS:
            raise _err(path, f"conformance must be a mapping with keys from {sorted(CONFORMANCE_KEYS)}", "conformance")
        from unirl_replay.conformance import runner as conf_runner
        from unirl_replay.reference.environments import REPO_ROOT

        revisions = _strs(path, c.get("revisions"), "conformance.revisions")
        if not revisions:
            inst = conf_runner.installed_revision()
            if not inst:
                raise _err(path, "conformance.revisions not given and ai-dynamo is not installed here", "conformance")
            revisions = [inst]
        for r in revisions:
            try:
                conf_runner.parse_revision(r)
            except Exception as e:  # noqa: BLE001 - re-raised with the spec file named
                raise _err(path, str(e), "conformance") from None
        shards = c.get("shards", 1)
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise _err(path, f"conformance.shards must be a positive integer, got {shards!r}", "conformance")
        corpus = _abs(base, c.get("corpus") or str(REPO_ROOT / "conformance"), path)
        if not (Path(corpus) / "cases").is_dir():
            raise _err(path, f"conformance corpus {corpus} has no cases/ folder", "conformance")
        cache = _abs(base, c["cache_dir"], path) if c.get("cache_dir") else str(REPO_ROOT / ".cache" / "conformance")
        conf = ConformanceSpec(corpus, revisions, _strs(path, c.get("cases"), "conformance.cases") or None, shards,
                               cache)
    if not traces and conf is None:
        raise _err(path, "nothing to run: give traces and timing_models, or conformance", "empty")
    out = data.get("out")
    if out is not None and (not isinstance(out, str) or not out):
        raise _err(path, f"out must be a directory path (a string), got {out!r}", "type")  # was silently ignored
    return GridSpec(str(path), traces, sims, models, fmt, _bool(path, data.get("compare"), "compare", True), layout,
                    _bool(path, data.get("keep_upstream"), "keep_upstream", True),
                    _abs(base, out, path) if isinstance(out, str) else None, conf, data)


def expand(spec: GridSpec) -> list[ReplayJob | ConformanceJob]:
    """The jobs of a spec, in spec order: traces x simulators x timing models, then conformance
    revisions x shards. Raises GridSpecError when two jobs would share a directory."""
    jobs: list[ReplayJob | ConformanceJob] = []
    for t in spec.traces:
        for s in spec.simulators:
            for m in spec.timing_models:
                jid = spec.layout.format(trace=t.name, simulator=simulator_tag(s), timing_model=m.name)
                if any(x in ("", ".", "..") for x in jid.split("/")) or "\\" in jid:  # "" also: absolute, "//"
                    raise _err(Path(spec.path), f"job directory {jid!r} (layout {spec.layout!r}) is not a relative "
                               "path inside --out: no '..', '.', absolute or empty parts in the layout or the names",
                               "layout")
                if any(len(x.encode("utf-8", "surrogatepass")) > 255 for x in jid.split("/")):  # NAME_MAX
                    raise _err(Path(spec.path), f"job directory {jid[:80]!r}... (layout {spec.layout!r}) has a part "
                               "longer than 255 bytes, more than a file system's name holds: shorten the trace or "
                               "timing model name", "layout")
                if any(ord(ch) < 32 or ord(ch) == 127 for ch in jid):  # a NUL was a ValueError traceback in mkdir
                    raise _err(Path(spec.path), f"job directory {jid!r} (layout {spec.layout!r}) holds a control "
                               "character: a trace / timing model name or the layout must be printable", "layout")
                jobs.append(ReplayJob(len(jobs), jid, t, s, m, spec.trace_format, spec.compare, spec.keep_upstream))
    if spec.conformance is not None:
        from unirl_replay.conformance.corpus import load_corpus

        c = spec.conformance
        cases = [k.name for k in load_corpus(Path(c.corpus), c.cases)]
        if c.cases:
            missing = sorted(set(c.cases) - set(cases))
            if missing:
                raise _err(Path(spec.path), f"conformance.cases not in the corpus: {missing}", "conformance")
        n = min(c.shards, max(len(cases), 1))
        chunks = [cases[i * len(cases) // n:(i + 1) * len(cases) // n] for i in range(n)]
        for rev in c.revisions:
            for k, chunk in enumerate(chunks):
                jid = f"conformance/{simulator_tag(rev)}" + (f"/shard-{k + 1}-of-{n}" if n > 1 else "")
                jobs.append(ConformanceJob(len(jobs), jid, c.corpus, rev, tuple(chunk), c.cache_dir))
    ids = [j.job_id for j in jobs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _err(Path(spec.path), f"jobs would share the directories {dup[:3]}: fix `layout` or the names",
                   "layout")
    _own_directories(Path(spec.path), spec, ids)
    return jobs


def _own_directories(path: Path, spec: GridSpec, ids: list[str]) -> None:
    """Each job's directory is its own: none inside another job's (a trace named ``grpo-a/fixed/upstream`` put one
    job in another's upstream/ folder, which that job's ``keep_upstream: false`` deleted, replay result and all,
    while grid.json said both were ok) and none where the grid writes its own files (grid.json, GRID.md, the
    conformance matrix: an IsADirectoryError after every job had run)."""
    from unirl_replay.contract.out_dir import MARKER
    from unirl_replay.grid.runner import GRID_JSON, GRID_MD

    reserved = {GRID_JSON, GRID_MD, MARKER, *(("conformance/matrix.json", "conformance/MATRIX.md") if spec.conformance else ())}
    for jid in ids:
        parts = jid.split("/")
        for k in range(1, len(parts) + 1):
            head = "/".join(parts[:k])
            if head in reserved:
                raise _err(path, f"job directory {jid!r} (layout {spec.layout!r}) is where the grid writes {head}: "
                           "rename the trace or timing model", "layout")
    own = set(ids)
    for jid in ids:
        parts = jid.split("/")
        outer = next(("/".join(parts[:k]) for k in range(1, len(parts)) if "/".join(parts[:k]) in own), None)
        if outer is not None:
            raise _err(path, f"job directory {jid!r} is inside the directory of the job {outer!r}, whose outputs "
                       "(upstream/, replay_result.json, the report) it would mix with or lose: fix `layout` or the "
                       "names so that no job's directory holds another's", "layout")
