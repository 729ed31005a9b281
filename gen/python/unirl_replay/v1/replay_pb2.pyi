from unirl_replay.v1 import common_pb2 as _common_pb2
from unirl_replay.v1 import manifest_pb2 as _manifest_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TimingModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMING_MODEL_KIND_UNSPECIFIED: _ClassVar[TimingModelKind]
    TIMING_MODEL_KIND_POLYNOMIAL: _ClassVar[TimingModelKind]
    TIMING_MODEL_KIND_FIXED: _ClassVar[TimingModelKind]
    TIMING_MODEL_KIND_PROFILE: _ClassVar[TimingModelKind]
    TIMING_MODEL_KIND_HARDWARE_DATABASE: _ClassVar[TimingModelKind]

class CalibrationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALIBRATION_STATUS_UNSPECIFIED: _ClassVar[CalibrationStatus]
    CALIBRATION_STATUS_UNCALIBRATED: _ClassVar[CalibrationStatus]
    CALIBRATION_STATUS_FIXED: _ClassVar[CalibrationStatus]
    CALIBRATION_STATUS_CALIBRATED: _ClassVar[CalibrationStatus]
    CALIBRATION_STATUS_UNVALIDATED: _ClassVar[CalibrationStatus]
    CALIBRATION_STATUS_CALIBRATED_PROBE: _ClassVar[CalibrationStatus]

class ResultGranularity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_GRANULARITY_UNSPECIFIED: _ClassVar[ResultGranularity]
    RESULT_GRANULARITY_PER_REQUEST: _ClassVar[ResultGranularity]
    RESULT_GRANULARITY_AGGREGATE_ONLY: _ClassVar[ResultGranularity]
TIMING_MODEL_KIND_UNSPECIFIED: TimingModelKind
TIMING_MODEL_KIND_POLYNOMIAL: TimingModelKind
TIMING_MODEL_KIND_FIXED: TimingModelKind
TIMING_MODEL_KIND_PROFILE: TimingModelKind
TIMING_MODEL_KIND_HARDWARE_DATABASE: TimingModelKind
CALIBRATION_STATUS_UNSPECIFIED: CalibrationStatus
CALIBRATION_STATUS_UNCALIBRATED: CalibrationStatus
CALIBRATION_STATUS_FIXED: CalibrationStatus
CALIBRATION_STATUS_CALIBRATED: CalibrationStatus
CALIBRATION_STATUS_UNVALIDATED: CalibrationStatus
CALIBRATION_STATUS_CALIBRATED_PROBE: CalibrationStatus
RESULT_GRANULARITY_UNSPECIFIED: ResultGranularity
RESULT_GRANULARITY_PER_REQUEST: ResultGranularity
RESULT_GRANULARITY_AGGREGATE_ONLY: ResultGranularity

class SimulatorIdentity(_message.Message):
    __slots__ = ("name", "version", "trace_format", "components")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    trace_format: str
    components: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., trace_format: _Optional[str] = ..., components: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TimingModel(_message.Message):
    __slots__ = ("kind", "calibration", "prefill_ms", "decode_ms", "profile_path", "profile_sha256", "calibration_workloads", "hardware", "model")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_PATH_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SHA256_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    kind: TimingModelKind
    calibration: CalibrationStatus
    prefill_ms: float
    decode_ms: float
    profile_path: str
    profile_sha256: str
    calibration_workloads: _containers.RepeatedScalarFieldContainer[str]
    hardware: str
    model: str
    def __init__(self, kind: _Optional[_Union[TimingModelKind, str]] = ..., calibration: _Optional[_Union[CalibrationStatus, str]] = ..., prefill_ms: _Optional[float] = ..., decode_ms: _Optional[float] = ..., profile_path: _Optional[str] = ..., profile_sha256: _Optional[str] = ..., calibration_workloads: _Optional[_Iterable[str]] = ..., hardware: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ReplayResult(_message.Message):
    __slots__ = ("schema_version", "trace_id", "workload_sha256", "simulator", "timing_model", "engines", "granularity", "cache_state", "requests", "trajectories", "groups", "rollout_batches", "aggregate", "makespan_ns", "simulator_wall_ns", "notes", "unmodelled_constraints")
    class AggregateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    SIMULATOR_FIELD_NUMBER: _ClassVar[int]
    TIMING_MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    CACHE_STATE_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCHES_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    MAKESPAN_NS_FIELD_NUMBER: _ClassVar[int]
    SIMULATOR_WALL_NS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    UNMODELLED_CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    trace_id: str
    workload_sha256: str
    simulator: SimulatorIdentity
    timing_model: TimingModel
    engines: _containers.RepeatedCompositeFieldContainer[_manifest_pb2.EngineConfig]
    granularity: ResultGranularity
    cache_state: _common_pb2.CacheStateKind
    requests: _containers.RepeatedCompositeFieldContainer[PredictedRequest]
    trajectories: _containers.RepeatedCompositeFieldContainer[PredictedTrajectory]
    groups: _containers.RepeatedCompositeFieldContainer[PredictedGroup]
    rollout_batches: _containers.RepeatedCompositeFieldContainer[PredictedBatch]
    aggregate: _containers.ScalarMap[str, float]
    makespan_ns: int
    simulator_wall_ns: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    unmodelled_constraints: _containers.RepeatedCompositeFieldContainer[UnmodelledConstraint]
    def __init__(self, schema_version: _Optional[str] = ..., trace_id: _Optional[str] = ..., workload_sha256: _Optional[str] = ..., simulator: _Optional[_Union[SimulatorIdentity, _Mapping]] = ..., timing_model: _Optional[_Union[TimingModel, _Mapping]] = ..., engines: _Optional[_Iterable[_Union[_manifest_pb2.EngineConfig, _Mapping]]] = ..., granularity: _Optional[_Union[ResultGranularity, str]] = ..., cache_state: _Optional[_Union[_common_pb2.CacheStateKind, str]] = ..., requests: _Optional[_Iterable[_Union[PredictedRequest, _Mapping]]] = ..., trajectories: _Optional[_Iterable[_Union[PredictedTrajectory, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[PredictedGroup, _Mapping]]] = ..., rollout_batches: _Optional[_Iterable[_Union[PredictedBatch, _Mapping]]] = ..., aggregate: _Optional[_Mapping[str, float]] = ..., makespan_ns: _Optional[int] = ..., simulator_wall_ns: _Optional[int] = ..., notes: _Optional[_Iterable[str]] = ..., unmodelled_constraints: _Optional[_Iterable[_Union[UnmodelledConstraint, _Mapping]]] = ...) -> None: ...

class UnmodelledConstraint(_message.Message):
    __slots__ = ("rule", "reason", "record_ids")
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    rule: str
    reason: str
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rule: _Optional[str] = ..., reason: _Optional[str] = ..., record_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PredictedRequest(_message.Message):
    __slots__ = ("request_id", "engine_id", "arrival_ns", "scheduled_ns", "first_token_ns", "completion_ns", "cached_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_NS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_NS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_NS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_NS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    engine_id: str
    arrival_ns: int
    scheduled_ns: int
    first_token_ns: int
    completion_ns: int
    cached_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., engine_id: _Optional[str] = ..., arrival_ns: _Optional[int] = ..., scheduled_ns: _Optional[int] = ..., first_token_ns: _Optional[int] = ..., completion_ns: _Optional[int] = ..., cached_tokens: _Optional[int] = ...) -> None: ...

class PredictedTrajectory(_message.Message):
    __slots__ = ("trajectory_id", "start_ns", "end_ns")
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    trajectory_id: str
    start_ns: int
    end_ns: int
    def __init__(self, trajectory_id: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ...) -> None: ...

class PredictedGroup(_message.Message):
    __slots__ = ("group_id", "completed_ns")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_NS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    completed_ns: int
    def __init__(self, group_id: _Optional[str] = ..., completed_ns: _Optional[int] = ...) -> None: ...

class PredictedBatch(_message.Message):
    __slots__ = ("rollout_batch_id", "ready_ns")
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    READY_NS_FIELD_NUMBER: _ClassVar[int]
    rollout_batch_id: str
    ready_ns: int
    def __init__(self, rollout_batch_id: _Optional[str] = ..., ready_ns: _Optional[int] = ...) -> None: ...
