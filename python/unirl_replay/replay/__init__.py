"""Stage 2, replay: the predictor. Trace workload in, simulated per-request times out.

Owns: pure converters to the simulators' input formats (``convert``), the checks of what upstream
can express, with typed rejections (``support``), the runner that plans, calls the simulator and
maps rows back by ``request_id`` (``runner``), derivation of trajectory / GRPO-group completion
and rollout-batch readiness (``derive``), timing-model specs (``timing_models``) and one adapter
module per simulator (``simulators``).

May import: ``unirl_replay.contract`` except ``contract.outcomes_io``, ``unirl_replay.v1`` except
``v1.outcomes_pb2``, and itself.
Never imports: the measured outcomes (``contract.outcomes_io``, ``v1.outcomes_pb2``: measured
service times are never given to the predictor), report, capture, reference, calibrate,
conformance, cli, demo. Only ``replay.simulators.<name>`` imports its simulator's package.
"""
