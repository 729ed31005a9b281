"""No raw content in captured traces: no prompt / output / tool text and no token ids.

Light env: every artifact of the bundled real traces is scanned (a) for the prompts' text,
regenerated from the manifest's workload knobs with the driver's own prompt function, and (b)
structurally: the only integer lists a trace may hold are per-sample output token counts, and the
only 64-bit lists are salted prefix hashes and tool durations, so no token-id list can hide.
Reference env (marked ``reference``): a small real capture with its raw records kept and the driver's
prompt dump (texts and token ids); every file of the trace directory, raw records included (for GRPO
also the reference probes' records and artifacts), is scanned for 3-word phrases of the prompts and
4-token runs of their ids.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from unirl_replay.capture.hashing import prefix_block_hashes, salt_id
from unirl_replay.reference.rollout_driver import window_prompts

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
BUNDLED = sorted(p.parent for p in TRACES.glob("*/manifest.json"))
REF = Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", ROOT / ".venv-ref" / "bin" / "python"))
#: Strings of the tiny model's tool calls and tools (never allowed in a trace).
TOOL_MARKERS = ("<tool_call>", "</tool_call>", '"arguments"', "expression", "17*23", "alpha", "beta")
INT_LIST_KEYS = {"output_tokens"}
WIDE_LIST_KEYS = {"block_hashes", "tool_durations_ns"}


def _phrases(texts: list[str], n: int = 3) -> set[str]:
    out = set()
    for t in texts:
        words = t.split()
        out.update(" ".join(words[i:i + n]) for i in range(max(0, len(words) - n + 1)))
        out.update(w for w in words if len(w) >= 9)
    return out


def _id_runs(token_ids: list[list[int]], n: int = 4) -> set[tuple[int, ...]]:
    return {tuple(ids[i:i + n]) for ids in token_ids for i in range(len(ids) - n + 1)}


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file())


def _knobs(manifest: dict) -> tuple[str, int, int, int, tuple[int, int]]:
    lab = manifest["labels"]
    lo, hi = lab["knob.prompt_words"].split(":")
    return lab["mode"], int(lab["knob.seed"]), int(lab["knob.batches"]), int(lab["knob.prompts"]), (int(lo), int(hi))


def _walk_lists(obj, key=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_lists(v, k)
    elif isinstance(obj, list):
        yield key, obj
        for v in obj:
            yield from _walk_lists(v, key)


def _structural_violations(path: Path) -> list[str]:
    bad = []
    lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
    for i, line in enumerate(lines, 1):
        for key, lst in _walk_lists(json.loads(line)):
            if any(isinstance(v, int) and not isinstance(v, bool) for v in lst) and key not in INT_LIST_KEYS:
                bad.append(f"{path.name}:{i} integer list under {key!r}")
            if any(isinstance(v, str) and v.isdigit() for v in lst) and key not in WIDE_LIST_KEYS:
                bad.append(f"{path.name}:{i} numeric-string list under {key!r}")
    return bad


def test_bundled_traces_exist():
    assert {p.name for p in BUNDLED} >= {"grpo-a", "agentic-a"}


@pytest.mark.parametrize("trace", BUNDLED, ids=lambda p: p.name)
def test_bundled_trace_holds_no_prompt_text_tool_text_or_token_ids(trace):
    manifest = json.loads((trace / "manifest.json").read_text())
    texts = [t for batch in window_prompts(*_knobs(manifest)) for t in batch]
    phrases = _phrases(texts)
    assert len(phrases) > 100
    files = _files(trace)
    assert {f.name for f in files} == {"manifest.json", "workload.jsonl", "outcomes.jsonl"}, "only the 3 artifacts"
    for f in files:
        text = f.read_text()
        leaked = [p for p in phrases if p in text]
        assert not leaked, f"{f.name} holds prompt text: {leaked[:3]}"
        assert not [m for m in TOOL_MARKERS if m in text], f"{f.name} holds tool-call text"
        assert not _structural_violations(f)
    assert manifest["privacy"]["content"] == "CONTENT_POLICY_EXCLUDED"
    assert re.fullmatch(r"[0-9a-f]{16}", manifest["privacy"]["hash_salt_id"])


def test_prefix_hashes_count_chain_and_salt():
    salt, other = bytes(16), bytes([1] * 16)
    a = list(range(300))
    h = prefix_block_hashes(a, 128, salt)
    assert len(h) == 3  # ceil(300/128): the partial last block is hashed too (field-pitfalls 3)
    assert len(prefix_block_hashes(a[:256], 128, salt)) == 2 and len(prefix_block_hashes(a[:257], 128, salt)) == 3
    assert prefix_block_hashes(a[:256] + [7, 8], 128, salt)[:2] == h[:2]  # equal prefix, equal hashes
    assert prefix_block_hashes([9] + a[1:], 128, salt)[1] != h[1]          # chained: a change propagates
    assert prefix_block_hashes(a, 128, other) != h                         # salted
    assert prefix_block_hashes(a[:128], 128, salt)[0] != prefix_block_hashes(a[:127], 128, salt)[0]
    assert all(0 <= x < 2**64 for x in h)
    assert salt_id(salt) != salt_id(other) and salt.hex() not in salt_id(salt)


@pytest.mark.reference
@pytest.mark.skipif(not REF.exists(), reason="reference environment (.venv-ref) absent: run `make reference-env`")
@pytest.mark.parametrize("mode", ["grpo", "agentic"])
def test_real_capture_artifacts_hold_no_prompt_text_or_token_ids(real_capture, mode):
    cap = real_capture(mode)  # one capture per mode and session, shared (tests/conftest.py)
    out = cap.trace
    prompts = json.loads(cap.prompts.read_text())
    phrases, runs = _phrases(prompts["texts"]), _id_runs(prompts["token_ids"])
    assert phrases and runs
    files = _files(out)
    assert any(f.parent.name == "raw" for f in files), "raw records kept for the scan"
    for f in files:
        text = f.read_text()
        assert not [p for p in phrases if p in text], f"{f} holds prompt text"
        assert not [m for m in TOOL_MARKERS if m in text], f"{f} holds tool-call text"
        numbers = [int(x) for x in re.findall(r"(?<![\d.])\d+(?![\d.])", text)]
        found = _id_runs([numbers]) & runs
        assert not found, f"{f} holds a run of prompt token ids: {sorted(found)[:2]}"
