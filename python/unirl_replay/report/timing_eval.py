"""The replay's timing model, evaluated outside the simulator (pure numpy; reads the profile NPZ).

The profile check and the error decomposition evaluate the timing model the replay used on the
REAL step schedule rebuilt from the measured outcomes (:mod:`unirl_replay.report.steps`). The math
is the Dynamo mocker's (``dynamo_mocker::common::perf_model``, ai-dynamo 1.6.1; replay-upstream.md):

- prefill pass: ``tokens = B * (avg_seq_len - avg_prefix_len)`` with integer averages over the
  pass's B prefilling sequences; ``P(tokens)``; 0 when no new token;
- decode step of B sequences with ``kv`` context tokens in all: ``D(kv, kv // B)``, floored at
  1 ms;
- a mixed pass (prefill and decode sequences) costs ``P + D``;
- ``profile``: ``P`` linear interpolation over ``prefill_isl`` and ``D`` bilinear over
  (``decode_active_kv_tokens``, ``decode_context_length``), both extrapolating linearly off-grid;
- ``polynomial`` (upstream's one generic curve): ``P = 4.209989e-7 t^2 + 1.518344e-2 t + 16.50142``,
  ``D = -25.74 u^2 + 54.01 u + 5.74`` with ``u = kv / KV capacity``;
- ``fixed``: ``P = prefill_ms`` per pass with new tokens, ``D = decode_ms`` per step.

Why here and not in ``replay.timing_models``: that module only parses a spec and checks a file;
the simulator does the evaluation. The report stage may not import ``replay`` (import rules), and
the evaluation is only needed by the report, so it lives in the report stage. A test checks it
against the real simulator (tests/test_report_steps.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unirl_replay.v1 import replay_pb2 as rpb

PROFILE_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")
DECODE_FLOOR_MS = 1.0


def _interp1(x: np.ndarray, y: np.ndarray, v: float) -> float:
    """Linear interpolation with linear extrapolation off both ends (ndarray_interp ``Linear``)."""
    if x.size == 1:
        return float(y[0])
    i = int(np.clip(np.searchsorted(x, v, side="right") - 1, 0, x.size - 2))
    t = (v - x[i]) / (x[i + 1] - x[i])
    return float(y[i] + t * (y[i + 1] - y[i]))


def _interp2(x: np.ndarray, y: np.ndarray, z: np.ndarray, u: float, v: float) -> float:
    """Bilinear interpolation of ``z[x, y]`` with linear extrapolation off the grid."""
    i = int(np.clip(np.searchsorted(x, u, side="right") - 1, 0, max(x.size - 2, 0)))
    j = int(np.clip(np.searchsorted(y, v, side="right") - 1, 0, max(y.size - 2, 0)))
    if x.size == 1 and y.size == 1:
        return float(z[0, 0])
    if x.size == 1:
        return _interp1(y, z[0], v)
    if y.size == 1:
        return _interp1(x, z[:, 0], u)
    tx = (u - x[i]) / (x[i + 1] - x[i])
    ty = (v - y[j]) / (y[j + 1] - y[j])
    a = z[i, j] + tx * (z[i + 1, j] - z[i, j])
    b = z[i, j + 1] + tx * (z[i + 1, j + 1] - z[i, j + 1])
    return float(a + ty * (b - a))


class StepModel:
    """Cost of one engine pass under a replay's timing model (ms).

    Build with :func:`step_model`. ``pass_ms(prefill, decode_ctx)`` is the mocker's cost of a pass
    that prefills sequences with new-token counts ``prefill`` and decodes sequences whose contexts
    are ``decode_ctx``.
    """

    def __init__(self, kind: str, kv_capacity_tokens: int, tables: dict | None = None,
                 fixed: tuple[float, float] | None = None) -> None:
        self.kind = kind
        self.kv_capacity_tokens = kv_capacity_tokens
        self.tables = tables or {}
        self.fixed = fixed

    def with_capacity(self, kv_capacity_tokens: int) -> StepModel:
        """The same model for an engine with another KV capacity (the polynomial decode uses it)."""
        return StepModel(self.kind, kv_capacity_tokens, self.tables, self.fixed)

    def prefill_ms(self, new_tokens: Sequence[int], prefix_tokens: Sequence[int] | None = None) -> float:
        b = len(new_tokens)
        if b == 0:
            return 0.0
        prefix = list(prefix_tokens) if prefix_tokens is not None else [0] * b
        seq = [n + p for n, p in zip(new_tokens, prefix)]
        eff = max(sum(seq) // b - sum(prefix) // b, 0)
        if eff == 0:
            return 0.0
        t = float(b * eff)
        if self.kind == "polynomial":
            ms = 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e01
        elif self.kind == "fixed":
            ms = self.fixed[0]
        else:
            ms = _interp1(self.tables["prefill_isl"], self.tables["prefill_ttft_ms"], t)
        return max(ms, 0.0)

    def decode_ms(self, contexts: Sequence[int]) -> float:
        b = len(contexts)
        if b == 0:
            return 0.0
        kv = int(sum(contexts))
        if self.kind == "polynomial":
            u = kv / self.kv_capacity_tokens if self.kv_capacity_tokens > 0 else 1.0
            ms = -25.74 * u * u + 54.01 * u + 5.74
        elif self.kind == "fixed":
            ms = self.fixed[1]
        else:
            t = self.tables
            ms = _interp2(t["decode_active_kv_tokens"], t["decode_context_length"], t["decode_itl"], float(kv),
                          float(kv // b))
        return max(ms, DECODE_FLOOR_MS)

    def pass_ms(self, prefill_new_tokens: Sequence[int], decode_contexts: Sequence[int],
                prefill_prefix_tokens: Sequence[int] | None = None) -> float:
        return self.prefill_ms(prefill_new_tokens, prefill_prefix_tokens) + self.decode_ms(decode_contexts)


class ProfileUnreadable(ValueError):
    """A profile file that is not a readable ``dynamo_profile`` NPZ (the message says why)."""


def read_profile(path: str | Path) -> tuple[dict[str, np.ndarray], dict, str]:
    """``(tables, provenance, sha256)`` of a ``dynamo_profile`` NPZ (provenance: NPZ key first,
    sidecar second, ``{}`` when neither), read by the one checked reader
    (:func:`unirl_replay.contract.profile_npz.load_profile`). Raises :class:`ProfileUnreadable`
    (a ValueError) naming the file and what is wrong."""
    from unirl_replay.contract.profile_npz import load_profile

    data, tables, prov = load_profile(Path(path), PROFILE_KEYS, ProfileUnreadable)
    return tables, prov, hashlib.sha256(data).hexdigest()


def _is_file(p: Path) -> bool:
    """``p.is_file()``, False where the path cannot even be looked up (a name too long: ENAMETOOLONG is raised,
    not returned as False): a replay result's profile_path is the trace's user's text."""
    try:
        return p.is_file()
    except (OSError, ValueError):
        return False


def step_model(tm: rpb.TimingModel, kv_capacity_tokens: int, search_dirs: Sequence[Path] = ()
               ) -> tuple[StepModel | None, dict, str]:
    """The step model of a replay's timing model: ``(model, provenance, reason)``.

    ``model`` is None with ``reason`` saying why (profile file absent, or not the file the replay
    used: its sha256 differs). A relative profile path is looked up as given, then under each of
    ``search_dirs``.
    """
    if tm.kind == rpb.TIMING_MODEL_KIND_POLYNOMIAL:
        return StepModel("polynomial", kv_capacity_tokens), {}, ""
    if tm.kind == rpb.TIMING_MODEL_KIND_FIXED:
        if not (tm.HasField("prefill_ms") and tm.HasField("decode_ms")):
            return None, {}, "fixed timing model without prefill_ms / decode_ms"
        return StepModel("fixed", kv_capacity_tokens, fixed=(tm.prefill_ms, tm.decode_ms)), {}, ""
    if tm.kind != rpb.TIMING_MODEL_KIND_PROFILE:
        return None, {}, "timing model kind unspecified"
    cands = [Path(tm.profile_path)] + [Path(d) / tm.profile_path for d in search_dirs]
    path = next((c for c in cands if _is_file(c)), None)
    if path is None:
        return None, {}, f"profile {tm.profile_path[:200]!r} not found here: the model cannot be evaluated"
    try:
        tables, prov, sha = read_profile(path)
    except ProfileUnreadable as e:  # names the file and what is wrong
        return None, {}, str(e)
    if tm.profile_sha256 and sha != tm.profile_sha256:
        return None, prov, (f"profile {str(path)!r} is not the file the replay used (sha256 {sha[:12]}..., the "
                            f"replay's {tm.profile_sha256[:12]}...)")
    return StepModel("profile", kv_capacity_tokens, tables=tables), prov, ""


def _sample(v: object) -> bool:
    """A repeat's time that is a sample: a number > 0 (the provenance schema lets an unusable repeat be None; a
    hand-edited 0 would make a median of 0 and a spread of nan %)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def profile_spread(prov: dict) -> str:
    """The profile's own repeat spread from its provenance (readable), or '' when not recorded."""
    raw = prov.get("raw") or {}
    parts = []
    by_isl: dict[int, list[float]] = {}
    for s in raw.get("prefill", []) or []:
        # a multi-row sweep's unusable repeat (its pass did not hold every row) has ttft_ms None: not a sample
        if isinstance(s, dict) and "isl" in s and _sample(s.get("ttft_ms")):
            by_isl.setdefault(int(s["isl"]), []).append(float(s["ttft_ms"]))
    rel = [100 * (np.percentile(v, 75) - np.percentile(v, 25)) / np.median(v) for v in by_isl.values() if len(v) >= 3]
    if rel:
        parts.append(f"prefill repeats IQR/median {np.median(rel):.1f} % (median over {len(rel)} ISLs, "
                     f"max {max(rel):.1f} %)")
    by_pt: dict[tuple, list[float]] = {}
    for d in raw.get("decode", []) or []:
        if isinstance(d, dict) and _sample(d.get("itl_ms")) and "batch" in d:  # an unusable repeat's itl_ms is None
            by_pt.setdefault((d["batch"], d.get("length")), []).append(float(d["itl_ms"]))
    drel = [100 * (max(v) - min(v)) / np.median(v) for v in by_pt.values() if len(v) >= 2]
    if drel:
        parts.append(f"decode repeats (max-min)/median {np.median(drel):.1f} % (median over {len(drel)} points, "
                     f"max {max(drel):.1f} %)")
    fit = prov.get("fit") or {}
    res = [f"{ph} {fit[ph]['residuals']['mape_pct']:.1f} %" for ph in ("prefill", "decode")
           if isinstance(fit.get(ph), dict) and isinstance(fit[ph].get("residuals"), dict)
           and "mape_pct" in fit[ph]["residuals"]]
    if res:
        parts.append("fit residual MAPE " + ", ".join(res))
    return "; ".join(parts)
