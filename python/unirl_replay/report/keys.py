"""The comparison's vocabulary: levels, metric keys, aggregate keys, matched pairs.

Shared by matching, statistics, labels, plots and the text report.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.v1 import report_pb2 as vpb

L_REQ = vpb.COMPARISON_LEVEL_REQUEST
L_GROUP = vpb.COMPARISON_LEVEL_GROUP
L_TRAJ = vpb.COMPARISON_LEVEL_TRAJECTORY
L_BATCH = vpb.COMPARISON_LEVEL_ROLLOUT_BATCH
L_AGG = vpb.COMPARISON_LEVEL_AGGREGATE

#: (level, metric) keys in report order.
METRIC_KEYS: tuple[tuple[int, str], ...] = (
    (L_REQ, "ttft"),
    (L_REQ, "e2e"),
    (L_REQ, "queueing_delay"),
    (L_REQ, "engine_ttft"),
    (L_REQ, "engine_e2e"),
    (L_GROUP, "group_completion"),
    (L_TRAJ, "trajectory_e2e"),
    (L_TRAJ, "slot_hold"),
    (L_BATCH, "batch_readiness"),
)

#: Aggregate keys of an aggregate-only result that have a matched measured counterpart:
#: key -> (request metric it summarises, statistic). Values in ms. The statistic is computed over
#: every workload request, so it is compared only when every request has the measured value.
AGGREGATE_KEYS: dict[str, tuple[str, str]] = {
    "mean_ttft_ms": ("ttft", "mean"),
    "min_ttft_ms": ("ttft", "min"),
    "max_ttft_ms": ("ttft", "max"),
    "mean_e2e_latency_ms": ("e2e", "mean"),
    "min_e2e_latency_ms": ("e2e", "min"),
    "max_e2e_latency_ms": ("e2e", "max"),
    "duration_ms": ("makespan", "value"),
}

LEVEL_NAMES = {
    L_REQ: "request",
    L_GROUP: "group",
    L_TRAJ: "trajectory",
    L_BATCH: "rollout_batch",
    L_AGG: "aggregate",
}


class ComparisonError(UnirlReplayError):
    """The inputs cannot be compared honestly (other trace, other clock, contradictory labels)."""


class Pairs(NamedTuple):
    """Matched pairs of one (level, metric): ``ids[i]`` has ``measured_ns[i]`` and ``predicted_ns[i]``.

    Arrays are int64, shape (N,), in workload order. Durations in ns.
    """

    ids: tuple[str, ...]
    measured_ns: np.ndarray
    predicted_ns: np.ndarray


# A side's values for one metric: record id -> duration in ns, or the reason it has none.
SideValues = dict[str, "int | str"]
