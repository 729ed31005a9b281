"""Output directories: created as needed; nothing the tool did not write is ever replaced.

Every command writing into a ``--out`` directory keeps a marker of its own there,
:data:`MARKER` (``.unirl-replay-output.json``): which command wrote which entries. The marker is
what makes an entry "ours", never a file name a user could also have (``summary.json``):

- :func:`claim` (before writing): creates the directory (and its parents) and refuses, with
  :class:`~unirl_replay.contract.errors.OutputExistsError`, when an entry about to be written
  exists and the marker does not list it (a user's file, or an older tool's output without marker);
- :func:`record` (after writing): adds the entries to the marker (atomic replace);
- :func:`prune` (after writing): removes what an earlier run of the same command wrote there and
  this run did not (a re-used ``compare --out`` never shows a plot of another trace);
- :func:`removed_on_failure` (around the work): a directory, or entry, the command created and
  then failed in is removed again, so a failed command leaves nothing behind;
- :func:`mark_tree` (demo, grid: after building a whole output tree) lists every entry of every
  directory of the tree in that directory's marker;
- :func:`replaceable` says whether a whole directory may be replaced (``demo --out``, ``grid --out``):
  it does not exist, is empty, or every entry in it, and in every directory below it, is listed by
  that directory's marker (:func:`foreign_entry` names the first one that is not: a user's
  ``notes.txt`` put inside an earlier demo output is never removed with it), and, for a command,
  what it holds is that command's own earlier output (:func:`refusal` says why not: ``grid --out``
  given a ``compare`` report or a demo output refuses it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable

from unirl_replay.contract.errors import OutputExistsError

MARKER = ".unirl-replay-output.json"
_TOOL = "unirl-replay"

__all__ = ["MARKER", "claim", "record", "prune", "removed_on_failure", "owned", "mark_tree", "foreign_entry",
           "replaceable", "refusal", "work_sibling", "swap_in", "trace_file_problem", "id_file_stem"]

#: Longest id kept whole in a file name derived from it (a 1024-character id is valid; file names end at 255 bytes).
ID_STEM_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_HASHED = re.compile(r"-[0-9a-f]{16}$")


def id_file_stem(value: str, among: Iterable[str] | None = None) -> str:
    """The part of a file name that stands for an id (an engine's converted file, a batch's plot).

    - the id itself when it is 1-64 ASCII letters, digits, ``_``, ``.``, ``-`` (and does not end as a hashed stem
      does);
    - else, for an id of at most 64 characters, that id with every other character as ``_`` (``vllm:vm:18522`` ->
      ``vllm_vm_18522``), when ``among`` (every id named side by side: a trace's engines) is given and no other id
      of it is or makes the same stem;
    - else its first 64 characters made so, then ``-`` and 16 hex digits of the id's sha256.

    So two ids named together never share a stem (``e/0`` and ``e_0`` wrote one file, the second replacing the
    first) and no stem outgrows a file-name limit (a 1000-character id was "File name too long" on a valid trace)."""
    def plain(v: str) -> bool:
        return 0 < len(v) <= ID_STEM_CHARS and not _UNSAFE.search(v) and not _HASHED.search(v) and v.strip(".") != ""

    if plain(value):
        return value
    s = _UNSAFE.sub("_", value[:ID_STEM_CHARS])
    if among is not None and len(value) <= ID_STEM_CHARS and plain(s):
        others = {o for o in among if o != value}
        if s not in others and all(_UNSAFE.sub("_", o[:ID_STEM_CHARS]) != s for o in others):
            return s
    return f"{s}-{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def trace_file_problem(path: str | os.PathLike) -> str | None:
    """Why an output file at ``path`` would break the trace directory it lies in, or None: its directory holds a
    trace (a manifest, a workload or outcomes file) and its name is one of a trace's own files (the manifest, a
    record stream of any encoding) or a writer's ``*.partial`` leftover, which makes every reader report the
    trace INCOMPLETE (``trace.partial_files``) until it is removed."""
    from unirl_replay.contract.trace_io import MANIFEST_FILE, OUTCOME_FILES, PARTIAL_SUFFIX, WORKLOAD_FILES

    p = Path(path)
    own = (MANIFEST_FILE, *WORKLOAD_FILES.values(), *OUTCOME_FILES.values())
    if p.name not in own and not p.name.endswith(PARTIAL_SUFFIX):
        return None
    try:
        is_trace = any(os.path.lexists(p.parent / n) for n in own)
    except (OSError, ValueError):
        return None
    if not is_trace:
        return None
    return (f"{p} is named as a file of the trace directory {p.parent} (its manifest, a record stream, or a "
            f"writer's {PARTIAL_SUFFIX} leftover, which makes every reader refuse the trace as incomplete): write "
            "it outside the trace, or under another name")


def owned(d: str | os.PathLike) -> set[str]:
    """Entry names of ``d`` that our marker lists (empty when there is no valid marker)."""
    p = Path(d) / MARKER
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 16 << 20:
            return set()
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("written_by") != _TOOL or not isinstance(doc.get("entries"), dict):
        return set()
    return {k for k in doc["entries"] if isinstance(k, str) and "/" not in k and k not in ("", ".", "..")}


def claim(d: str | os.PathLike, names: Iterable[str], command: str) -> Path:
    """Create ``d`` when needed and check that writing ``names`` there replaces nothing foreign.

    Raises:
        OutputExistsError: ``d`` is not a directory, or one of ``names`` exists in it without
            being listed by our marker.
    """
    d = Path(d)
    if os.path.lexists(d) and not d.is_dir():
        raise OutputExistsError(f"{d} exists and is not a directory; --out of `{command}` is a directory")
    d.mkdir(parents=True, exist_ok=True)
    mine = owned(d)
    foreign = [n for n in names if os.path.lexists(d / n) and n not in mine]
    if foreign:
        raise OutputExistsError(f"{d} already holds {', '.join(sorted(foreign)[:5])}, which unirl-replay did not "
                                f"write (no {MARKER} lists it): `{command}` never replaces a file it did not write; "
                                "choose another --out or move those files")
    return d


def record(d: str | os.PathLike, names: Iterable[str], command: str) -> None:
    """List ``names`` in ``d``'s marker as written by ``command`` (atomic replace of the marker)."""
    d = Path(d)
    entries = _entries(d)
    entries.update({n: command for n in names})
    _write_marker(d, entries)


def written_by(d: str | os.PathLike, command: str) -> list[str]:
    """What ``command`` wrote in ``d`` and its immediate subdirectories by this tool's markers, as paths relative to
    ``d`` (a subdirectory is named whole, ``report/``), sorted; [] when nothing. E.g. ``replay`` names the
    ``compare`` report of an earlier result left beside the one it just wrote."""
    d = Path(d)
    here = sorted(n for n, c in _entries(d).items() if c == command and os.path.lexists(d / n))
    try:
        subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        subs = []
    return here + [f"{p.name}/" for p in subs if p.name not in here and command in _entries(p).values()]


def _write_marker(d: Path, entries: dict[str, str]) -> None:
    p = d / MARKER
    data = json.dumps({"written_by": _TOOL, "entries": dict(sorted(entries.items()))}, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{MARKER}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _entries(d: Path) -> dict[str, str]:
    """name -> command of the valid entries our marker lists (those :func:`owned` accepts)."""
    names = owned(d)
    if not names:
        return {}
    try:
        raw = json.loads((d / MARKER).read_text(encoding="utf-8"))["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {n: c for n, c in raw.items() if n in names and isinstance(c, str)}


def prune(d: str | os.PathLike, keep: Iterable[str], command: str) -> list[str]:
    """Remove the entries of ``d`` our marker lists as written by ``command`` that are not in ``keep``
    (what an earlier run of ``command`` wrote and this one did not), and drop them from the marker.

    Only plain files are removed (never a directory, a link or anything the marker does not list).
    Returns the removed names, sorted.
    """
    d = Path(d)
    entries = _entries(d)
    keep = set(keep)
    stale = sorted(n for n, c in entries.items() if c == command and n not in keep)
    removed = []
    for n in stale:
        p = d / n
        if p.is_symlink() or not p.exists():
            entries.pop(n, None)
            continue
        if p.is_file():
            p.unlink()
            entries.pop(n, None)
            removed.append(n)
    if stale:
        _write_marker(d, entries)
    return removed


class removed_on_failure:
    """Context manager: when the block raises, remove ``d`` (and the parents made for it) if this
    block created it, else remove the ``entries`` of ``d`` that did not exist before the block
    (everything in them is then ours).

    Entries that existed before are never touched: a failed re-run leaves an earlier result as it was.
    """

    def __init__(self, d: str | os.PathLike, entries: Iterable[str] = ()) -> None:
        self.d = Path(d)
        self.names = list(entries)

    def __enter__(self) -> "removed_on_failure":
        self.existed = os.path.lexists(self.d)
        self.before = {n for n in self.names if os.path.lexists(self.d / n)} if self.existed else set()
        top = self.d.absolute()  # the highest missing ancestor: what a `mkdir -p` of d would create
        while not os.path.lexists(top.parent) and top.parent != top:
            top = top.parent
        self.top = top
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        import shutil

        if exc_type is None:
            return False
        if not self.existed:
            shutil.rmtree(self.top, ignore_errors=True)
        else:
            for n in self.names:
                p = self.d / n
                if n in self.before or not os.path.lexists(p):
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        return False


def mark_tree(root: str | os.PathLike, command: str) -> None:
    """List every entry of ``root`` and of every directory below it (links not followed) in that
    directory's marker, as written by ``command`` (entries already listed keep their command).

    Called on a whole output tree the tool has just built (demo, grid), before it is moved into
    place: :func:`replaceable` then tells the tool's own entries from anything added later.
    """
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        names = [n for n in dirnames + filenames if n != MARKER and not n.startswith(f".{MARKER}.")]
        entries = _entries(d)
        entries.update({n: entries.get(n, command) for n in names})
        _write_marker(d, entries)


def foreign_entry(d: str | os.PathLike) -> Path | None:
    """The first entry of ``d``, or of a directory below it (links not followed), that the marker of
    its directory does not list; None when there is none (or ``d`` does not exist)."""
    d = Path(d)
    if not os.path.lexists(d):
        return None
    if not d.is_dir() or d.is_symlink():
        return d
    stack = [d]
    while stack:
        cur = stack.pop()
        mine = owned(cur) | {MARKER}
        try:
            entries = sorted(cur.iterdir(), key=lambda e: e.name)
        except OSError:
            return cur
        for e in entries:
            if e.name not in mine:
                return e
            if e.is_dir() and not e.is_symlink():
                stack.append(e)
    return None


def replaceable(d: str | os.PathLike, command: str | None = None) -> bool:
    """True when ``d`` may be replaced whole: absent, empty, or holding only entries our markers list,
    at every level below it too (:func:`foreign_entry`); with ``command``, also only an earlier output of
    that command (every entry of ``d`` itself listed as written by it: see :func:`refusal`)."""
    if command is not None:
        return refusal(d, command) is None
    d = Path(d)
    if not os.path.lexists(d):
        return True
    if not d.is_dir() or d.is_symlink():
        return False
    if not any(True for _ in d.iterdir()):
        return True
    return foreign_entry(d) is None


def refusal(d: str | os.PathLike, command: str) -> str | None:
    """Why ``command`` (``demo``, ``grid``: they replace their ``--out`` whole) may not replace ``d``, in words that
    name the entry and who wrote it; None when it may: ``d`` is absent or empty, or is an earlier output of
    ``command`` itself (every entry of ``d`` listed by its marker as written by ``command``) holding nothing our
    markers do not list at any level below (:func:`foreign_entry`). Another command's output (a ``compare``
    report, a ``demo`` output given to ``grid``) is refused too: it is a user's result, not this command's to
    replace."""
    d = Path(d)
    if not os.path.lexists(d):
        return None
    if not d.is_dir() or d.is_symlink():
        return f"{d} exists and is not a directory"
    try:
        names = sorted(e.name for e in d.iterdir())
    except OSError as e:
        return f"{d} cannot be read ({e.strerror or e})"
    if not names:
        return None
    top = _entries(d)
    for n in names:
        c = top.get(n)
        if c is not None and c != command:
            return (f"it holds {d / n}, which `unirl-replay {c}` wrote, not an earlier `unirl-replay {command}`: "
                    f"`{command}` replaces only its own output")
    e = foreign_entry(d)
    if e is None:
        return None
    inner = sorted(set(_entries(e).values())) if e.is_dir() and not e.is_symlink() else []
    if inner:
        return (f"it holds {e}, an output of `unirl-replay {', '.join(inner)}` that is not part of an earlier "
                f"`unirl-replay {command}` output (the {MARKER} of {e.parent} does not list it)")
    return f"it holds {e}, which unirl-replay did not write (no {MARKER} lists it)"


def work_sibling(out_dir: str | os.PathLike) -> Path:
    """A fresh hidden directory next to ``out_dir`` (``.<name>.XXXX.partial``) to build an output in before
    :func:`swap_in` moves it into place, with the mode an ordinary ``mkdir`` gives (the umask's), not
    ``mkdtemp``'s private 0700. Creates ``out_dir``'s parents when needed."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    work.chmod(0o777 & ~umask)
    return work


def swap_in(work: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Move the finished directory ``work`` (built aside, next to ``out_dir``) into place.

    An existing ``out_dir`` (the caller has checked it is :func:`replaceable`) is renamed aside
    first and removed only after ``work`` is in place, so a failure never leaves neither.
    """
    import shutil

    work, out_dir = Path(work), Path(out_dir)
    if out_dir.exists():
        # aside into a fresh private directory: never a fixed name (a user's `.demo.old` next to the output
        # was removed whole)
        aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
        out_dir.rename(aside / out_dir.name)
        work.rename(out_dir)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        work.rename(out_dir)

