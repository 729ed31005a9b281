"""Manifest for the benchmark trace (kept apart so the benchmark does not depend on tests/)."""

from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m


def manifest(n: int) -> m.TraceManifest:
    return m.TraceManifest(
        trace_id=f"bench-{n}", producer=m.Producer(name="bench_trace_io", version="0"),
        engines=[m.EngineConfig(engine_id="e0", block_size_tokens=16)],
        window=m.CaptureWindow(duration_ns=(n + 100) * 1_000_000, clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED), role=c.WORKLOAD_ROLE_UNLABELLED,
        cache_state=c.CACHE_STATE_KIND_COLD)
