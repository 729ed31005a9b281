from unirl_replay.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GroupUnit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_UNIT_UNSPECIFIED: _ClassVar[GroupUnit]
    GROUP_UNIT_SAMPLES: _ClassVar[GroupUnit]
    GROUP_UNIT_TRAJECTORIES: _ClassVar[GroupUnit]

class BatchReadinessRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_READINESS_RULE_UNSPECIFIED: _ClassVar[BatchReadinessRule]
    BATCH_READINESS_RULE_ALL_GROUPS: _ClassVar[BatchReadinessRule]
    BATCH_READINESS_RULE_FIRST_N_GROUPS: _ClassVar[BatchReadinessRule]
GROUP_UNIT_UNSPECIFIED: GroupUnit
GROUP_UNIT_SAMPLES: GroupUnit
GROUP_UNIT_TRAJECTORIES: GroupUnit
BATCH_READINESS_RULE_UNSPECIFIED: BatchReadinessRule
BATCH_READINESS_RULE_ALL_GROUPS: BatchReadinessRule
BATCH_READINESS_RULE_FIRST_N_GROUPS: BatchReadinessRule

class WorkloadRecord(_message.Message):
    __slots__ = ("request", "trajectory", "group", "rollout_batch", "slot_pool", "engine_client", "cache_warmup")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_FIELD_NUMBER: _ClassVar[int]
    SLOT_POOL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CLIENT_FIELD_NUMBER: _ClassVar[int]
    CACHE_WARMUP_FIELD_NUMBER: _ClassVar[int]
    request: Request
    trajectory: Trajectory
    group: Group
    rollout_batch: RolloutBatch
    slot_pool: SlotPool
    engine_client: EngineClient
    cache_warmup: CacheWarmup
    def __init__(self, request: _Optional[_Union[Request, _Mapping]] = ..., trajectory: _Optional[_Union[Trajectory, _Mapping]] = ..., group: _Optional[_Union[Group, _Mapping]] = ..., rollout_batch: _Optional[_Union[RolloutBatch, _Mapping]] = ..., slot_pool: _Optional[_Union[SlotPool, _Mapping]] = ..., engine_client: _Optional[_Union[EngineClient, _Mapping]] = ..., cache_warmup: _Optional[_Union[CacheWarmup, _Mapping]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("request_id", "sample_ids", "num_samples", "trajectory_id", "turn_index", "group_id", "rollout_batch_id", "engine_id", "worker_id", "policy_version", "input_tokens", "output_tokens", "prefix", "arrival", "dependencies", "finish_reasons", "max_output_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASONS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    sample_ids: _containers.RepeatedScalarFieldContainer[str]
    num_samples: int
    trajectory_id: str
    turn_index: int
    group_id: str
    rollout_batch_id: str
    engine_id: str
    worker_id: str
    policy_version: int
    input_tokens: int
    output_tokens: _containers.RepeatedScalarFieldContainer[int]
    prefix: _common_pb2.PrefixBlocks
    arrival: Arrival
    dependencies: _containers.RepeatedCompositeFieldContainer[Dependency]
    finish_reasons: _containers.RepeatedScalarFieldContainer[_common_pb2.FinishReason]
    max_output_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., sample_ids: _Optional[_Iterable[str]] = ..., num_samples: _Optional[int] = ..., trajectory_id: _Optional[str] = ..., turn_index: _Optional[int] = ..., group_id: _Optional[str] = ..., rollout_batch_id: _Optional[str] = ..., engine_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., policy_version: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[_Iterable[int]] = ..., prefix: _Optional[_Union[_common_pb2.PrefixBlocks, _Mapping]] = ..., arrival: _Optional[_Union[Arrival, _Mapping]] = ..., dependencies: _Optional[_Iterable[_Union[Dependency, _Mapping]]] = ..., finish_reasons: _Optional[_Iterable[_Union[_common_pb2.FinishReason, str]]] = ..., max_output_tokens: _Optional[int] = ...) -> None: ...

class Arrival(_message.Message):
    __slots__ = ("observed_offset_ns", "after_dependencies")
    OBSERVED_OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    AFTER_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    observed_offset_ns: int
    after_dependencies: AfterDependencies
    def __init__(self, observed_offset_ns: _Optional[int] = ..., after_dependencies: _Optional[_Union[AfterDependencies, _Mapping]] = ...) -> None: ...

class AfterDependencies(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Dependency(_message.Message):
    __slots__ = ("predecessor_request_id", "trigger", "relation", "external_delay_ns", "delay_absence")
    PREDECESSOR_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_DELAY_NS_FIELD_NUMBER: _ClassVar[int]
    DELAY_ABSENCE_FIELD_NUMBER: _ClassVar[int]
    predecessor_request_id: str
    trigger: _common_pb2.DependencyTrigger
    relation: _common_pb2.DependencyRelation
    external_delay_ns: int
    delay_absence: _common_pb2.DelayAbsence
    def __init__(self, predecessor_request_id: _Optional[str] = ..., trigger: _Optional[_Union[_common_pb2.DependencyTrigger, str]] = ..., relation: _Optional[_Union[_common_pb2.DependencyRelation, str]] = ..., external_delay_ns: _Optional[int] = ..., delay_absence: _Optional[_Union[_common_pb2.DelayAbsence, str]] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("trajectory_id", "group_id", "rollout_batch_id", "engine_id", "worker_id", "slot_pool_id", "request_ids", "root_sample_id", "start_order", "first_turn_index")
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_POOL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    ROOT_SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    START_ORDER_FIELD_NUMBER: _ClassVar[int]
    FIRST_TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    trajectory_id: str
    group_id: str
    rollout_batch_id: str
    engine_id: str
    worker_id: str
    slot_pool_id: str
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    root_sample_id: str
    start_order: int
    first_turn_index: int
    def __init__(self, trajectory_id: _Optional[str] = ..., group_id: _Optional[str] = ..., rollout_batch_id: _Optional[str] = ..., engine_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., slot_pool_id: _Optional[str] = ..., request_ids: _Optional[_Iterable[str]] = ..., root_sample_id: _Optional[str] = ..., start_order: _Optional[int] = ..., first_turn_index: _Optional[int] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("group_id", "rollout_batch_id", "unit", "expected_size", "member_ids", "resumed_from_rollout_batch_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    rollout_batch_id: str
    unit: GroupUnit
    expected_size: int
    member_ids: _containers.RepeatedScalarFieldContainer[str]
    resumed_from_rollout_batch_id: str
    def __init__(self, group_id: _Optional[str] = ..., rollout_batch_id: _Optional[str] = ..., unit: _Optional[_Union[GroupUnit, str]] = ..., expected_size: _Optional[int] = ..., member_ids: _Optional[_Iterable[str]] = ..., resumed_from_rollout_batch_id: _Optional[str] = ...) -> None: ...

class RolloutBatch(_message.Message):
    __slots__ = ("rollout_batch_id", "group_ids", "readiness_rule", "required_groups", "engine_ids", "after_batch")
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    READINESS_RULE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_IDS_FIELD_NUMBER: _ClassVar[int]
    AFTER_BATCH_FIELD_NUMBER: _ClassVar[int]
    rollout_batch_id: str
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    readiness_rule: BatchReadinessRule
    required_groups: int
    engine_ids: _containers.RepeatedScalarFieldContainer[str]
    after_batch: BatchBoundary
    def __init__(self, rollout_batch_id: _Optional[str] = ..., group_ids: _Optional[_Iterable[str]] = ..., readiness_rule: _Optional[_Union[BatchReadinessRule, str]] = ..., required_groups: _Optional[int] = ..., engine_ids: _Optional[_Iterable[str]] = ..., after_batch: _Optional[_Union[BatchBoundary, _Mapping]] = ...) -> None: ...

class BatchBoundary(_message.Message):
    __slots__ = ("previous_rollout_batch_id", "driver_gap_ns")
    PREVIOUS_ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_GAP_NS_FIELD_NUMBER: _ClassVar[int]
    previous_rollout_batch_id: str
    driver_gap_ns: int
    def __init__(self, previous_rollout_batch_id: _Optional[str] = ..., driver_gap_ns: _Optional[int] = ...) -> None: ...

class SlotPool(_message.Message):
    __slots__ = ("pool_id", "engine_ids", "worker_id", "trajectory_slots")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_IDS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    pool_id: str
    engine_ids: _containers.RepeatedScalarFieldContainer[str]
    worker_id: str
    trajectory_slots: int
    def __init__(self, pool_id: _Optional[str] = ..., engine_ids: _Optional[_Iterable[str]] = ..., worker_id: _Optional[str] = ..., trajectory_slots: _Optional[int] = ...) -> None: ...

class EngineClient(_message.Message):
    __slots__ = ("engine_id", "inflight_request_limit")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_REQUEST_LIMIT_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    inflight_request_limit: int
    def __init__(self, engine_id: _Optional[str] = ..., inflight_request_limit: _Optional[int] = ...) -> None: ...

class CacheWarmup(_message.Message):
    __slots__ = ("warmup_id", "engine_id", "input_tokens", "prefix")
    WARMUP_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    warmup_id: str
    engine_id: str
    input_tokens: int
    prefix: _common_pb2.PrefixBlocks
    def __init__(self, warmup_id: _Optional[str] = ..., engine_id: _Optional[str] = ..., input_tokens: _Optional[int] = ..., prefix: _Optional[_Union[_common_pb2.PrefixBlocks, _Mapping]] = ...) -> None: ...
