"""What a newcomer trying the tool from its README met (session 18): each test failed before its fix."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_missing_replay_extra_says_how_to_install_it(monkeypatch):
    """A wheel install without the `replay` extra was told `pip install 'unirl-replay[replay]'` (the package is not
    on PyPI: the README says so) "with uv's override of its aisimulate stub: see the README", which said nothing of
    it; `pip install "<wheel>[replay]"` fails building that stub. The message now gives the uv command and the
    README has it."""
    from unirl_replay.contract.errors import MissingEnvironmentError
    from unirl_replay.replay.simulators import dynamo

    real = importlib.metadata.version

    def version(name):
        if name == "ai-dynamo":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(MissingEnvironmentError) as e:
        dynamo.simulator_versions()
    msg = str(e.value)
    assert "pip install 'unirl-replay[replay]'" not in msg
    assert "--overrides" in msg and "aisimulate; sys_platform == 'never'" in msg and "make env" in msg

    monkeypatch.setitem(sys.modules, "dynamo.replay", None)  # import fails as without the extra
    with pytest.raises(MissingEnvironmentError) as e:
        dynamo._import_replay()
    assert "--overrides" in str(e.value)

    readme = _readme()
    assert "--overrides" in readme and "aisimulate; sys_platform == 'never'" in readme
    assert re.search(r'uv pip install [^\n]*--overrides [^\n]*whl\[replay\]', readme)
