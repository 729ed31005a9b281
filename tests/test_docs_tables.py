"""The README's command tour and docs/architecture.md's package table say what exists.

A newcomer reads both first: a verb missing from the tour, or a module the package table does not
name (13 were missing from it: contract ``fast_jsonl``, report ``explain``, replay ``mapback``...),
sends them to the source instead. Pure file checks, no engine.
"""

from __future__ import annotations

import re
from pathlib import Path

from unirl_replay.cli.capture import command as capture_group
from unirl_replay.cli.main import COMMANDS

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "python" / "unirl_replay"


def _tour() -> list[str]:
    """First cells of the README's 'Tour of the commands' table."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Tour of the commands", 1)[1].split("\n## ", 1)[0]
    return [re.split(r"(?<!\\)\|", line)[1].strip() for line in section.splitlines() if line.startswith("| `")]


def test_every_verb_and_capture_subcommand_is_in_the_readme_tour():
    cells = _tour()
    for verb in COMMANDS:
        assert any(c.startswith(f"`{verb} ") or c.startswith(f"`{verb}`") for c in cells), \
            f"`unirl-replay {verb}` is missing from README's 'Tour of the commands'"
    visible = [n for n, c in capture_group.commands.items() if not c.hidden]
    for sub in visible:
        assert any(re.match(rf"`capture [a-z|\\-]*\b{re.escape(sub)}\b", c) for c in cells), \
            f"`unirl-replay capture {sub}` is missing from README's 'Tour of the commands'"


def _package_rows() -> dict[str, str]:
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z_]+)/` \|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_architecture_package_table_names_every_module():
    rows = _package_rows()
    stages = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").exists() and p.name != "v1")
    assert sorted(rows) == stages, "docs/architecture.md: one row per package"
    missing = []
    for stage in stages:
        if stage == "cli":  # "one thin module per verb": checked against the tour above
            continue
        for f in sorted((PKG / stage).rglob("*.py")):
            if f.stem != "__init__" and f"`{f.stem}`" not in rows[stage]:
                missing.append(str(f.relative_to(PKG)))
    assert not missing, f"modules the package table of docs/architecture.md does not name: {missing}"


#: Names in code font in the "owns" column that are not modules (formats, libraries, Ray terms).
NOT_MODULES = {"arrow", "msgspec", "runtime_env", "worker_process_setup_hook", "request_id"}


def test_architecture_package_table_names_no_module_that_does_not_exist():
    rows = _package_rows()
    for stage, owns in rows.items():
        for name in set(re.findall(r"`([a-z_]+)`", owns)) - NOT_MODULES:
            found = list((PKG / stage).rglob(f"{name}.py")) or (PKG / stage / name).is_dir()
            assert found, f"docs/architecture.md names {stage}/{name}, which does not exist"
