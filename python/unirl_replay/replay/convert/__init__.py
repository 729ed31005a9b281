"""Pure conversion of workload records to Dynamo Replay inputs.

``support`` checks what upstream can express (typed rejections) and plans one replay per engine;
``agentic_mooncake`` (primary, closed loop) and ``mooncake`` (open loop) build the upstream rows.
This package never reads measured outcomes.
"""

from unirl_replay.replay.convert import agentic_mooncake, mooncake

CONVERTERS = {"agentic_mooncake": agentic_mooncake.convert_engine, "mooncake": mooncake.convert_engine}
