"""One adapter module per simulator behind one narrow interface; the only modules that import a
simulator's package.

The interface (:class:`Simulator`): in, one :class:`SimulatorJob` (a converted upstream file, the
engine settings, the timing model, the lanes); out, a :class:`SimulatorRun` (upstream per-request
rows, which echo ``request_id``, and the summary, unchanged: ms, upstream field names) and the
simulator's identity (``name``, ``version``, ``components``). Mapping rows back to the contract is
:mod:`unirl_replay.replay.runner`'s job; it picks a simulator by spec with :func:`get_simulator`.

Adapters:

* ``dynamo``: NVIDIA Dynamo Replay (``ai-dynamo``, pinned in ``pyproject.toml``), imported lazily so
  the light commands work without it. The default.
* ``aisimulate``: an exact pinned AISimulate dev build (``aisimulate==<dev version>``), run in its
  own cached isolated environment (``.cache/simulators/``, :mod:`.environments`) through a
  JSON-lines subprocess worker; the light environment never imports it.

Spec: ``dynamo`` (= ``ai-dynamo`` as installed) | ``aisimulate`` (= :data:`AISIMULATE_DEFAULT`) |
``aisimulate==VERSION``.

May import: ``unirl_replay.contract.errors`` and the simulator package it adapts (the adapter of
that simulator only, and ``aisimulate`` only inside its isolated environment's worker).
Never imports: measured outcomes, or another simulator's package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from unirl_replay.contract.errors import UnirlReplayError

#: The aisimulate build ``--simulator aisimulate`` means (an exact dev build on PyPI; the final
#: ``0.13.0`` is a download stub that cannot be installed here).
AISIMULATE_DEFAULT = "0.13.0.dev202610270000000085"
DEFAULT_SIMULATOR = "dynamo"
#: Spec names -> adapter module (``unirl_replay.replay.simulators.<module>``).
ADAPTERS = {"dynamo": "dynamo", "ai-dynamo": "dynamo", "aisimulate": "aisimulate"}


class SimulatorSpecError(UnirlReplayError):
    """A ``--simulator`` spec is malformed or names no known simulator."""


@dataclass(frozen=True)
class SimulatorJob:
    """One upstream replay: a converted file and how to run it (one single-worker engine).

    Attributes:
        trace_file: the upstream input (from ``Conversion.write``).
        trace_format: ``"agentic_mooncake"`` or ``"mooncake"``.
        engine: engine settings with dynamo.replay key names (``block_size``, ``num_gpu_blocks``,
            ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
            ``enable_prefix_caching``, ``enable_chunked_prefill``); a key left out means upstream's
            default (see ``convert.common.engine_args``).
        timing_model: the timing-model dict of ``timing_models.parse_timing_model``.
        lanes: ``agentic_lanes`` (agentic only), None = unlimited.
        block_size: hash block size of the file (tokens; mooncake's ``trace_block_size``).
        execution_model: the agentic target model name.
        per_request: ask for per-request rows.
    """

    trace_file: Path
    trace_format: str
    engine: dict[str, Any]
    timing_model: dict[str, Any]
    lanes: int | None = None
    block_size: int | None = None
    execution_model: str | None = None
    per_request: bool = True


@dataclass
class SimulatorRun:
    """What one upstream replay returned.

    Attributes:
        per_request: upstream rows (dicts, ms), or None when the runner gave aggregates only.
        summary: upstream summary (includes warm-up requests).
        wall_ns: wall time of the simulator call itself, ns (not the worker's start).
        notes: what the adapter had to do to run the job that a reader must know (into
            ``ReplayResult.notes``).
    """

    per_request: list[dict[str, Any]] | None
    summary: dict[str, Any]
    wall_ns: int
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Identity:
    """Who predicted: ``SimulatorIdentity`` fields (name, version, other component versions)."""

    name: str
    version: str
    components: dict[str, str] = field(default_factory=dict)


class Simulator(Protocol):
    """The narrow interface every adapter implements."""

    #: timing-model ``type`` values the simulator accepts (others are refused before any run).
    timing_types: tuple[str, ...]

    def identity(self) -> Identity:
        """Name and version of the simulator that will run (raises MissingEnvironmentError)."""

    def run(self, job: SimulatorJob) -> SimulatorRun:
        """Replay one converted file; rows and summary unchanged."""


def parse_simulator(spec: str) -> tuple[str, str | None]:
    """``"dynamo"`` -> ``("dynamo", None)``; ``"aisimulate==0.13.0.dev…"`` -> ``("aisimulate", "0.13.0.dev…")``.

    Raises:
        SimulatorSpecError: unknown name, or a malformed ``==`` part.
    """
    name, sep, version = (spec or "").strip().partition("==")
    name, version = name.strip(), version.strip()
    if name not in ADAPTERS or (sep and not version):
        raise SimulatorSpecError(f"unknown simulator {spec!r}; use dynamo | aisimulate | aisimulate==VERSION "
                                 f"(e.g. aisimulate=={AISIMULATE_DEFAULT})")
    from unirl_replay.replay.simulators.environments import valid_version

    if version and not valid_version(version):  # the version names a cached environment directory
        raise SimulatorSpecError(f"simulator {spec!r}: {version!r} is not a version (digits, dots and letters, "
                                 f"e.g. aisimulate=={AISIMULATE_DEFAULT})")
    module = ADAPTERS[name]
    if module == "aisimulate" and not version:
        version = AISIMULATE_DEFAULT
    return module, (version or None)


def get_simulator(spec: str = DEFAULT_SIMULATOR, **options: Any) -> Simulator:
    """The adapter for ``spec`` (its module is imported here, lazily).

    ``options`` go to the adapter (aisimulate: ``cache_dir``, ``log``).
    """
    module, version = parse_simulator(spec)
    mod = importlib.import_module(f"{__name__}.{module}")
    return mod.adapter(version, **options)
