from unirl_replay.v1 import common_pb2 as _common_pb2
from unirl_replay.v1 import manifest_pb2 as _manifest_pb2
from unirl_replay.v1 import replay_pb2 as _replay_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ComparisonLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPARISON_LEVEL_UNSPECIFIED: _ClassVar[ComparisonLevel]
    COMPARISON_LEVEL_REQUEST: _ClassVar[ComparisonLevel]
    COMPARISON_LEVEL_GROUP: _ClassVar[ComparisonLevel]
    COMPARISON_LEVEL_TRAJECTORY: _ClassVar[ComparisonLevel]
    COMPARISON_LEVEL_ROLLOUT_BATCH: _ClassVar[ComparisonLevel]
    COMPARISON_LEVEL_AGGREGATE: _ClassVar[ComparisonLevel]
COMPARISON_LEVEL_UNSPECIFIED: ComparisonLevel
COMPARISON_LEVEL_REQUEST: ComparisonLevel
COMPARISON_LEVEL_GROUP: ComparisonLevel
COMPARISON_LEVEL_TRAJECTORY: ComparisonLevel
COMPARISON_LEVEL_ROLLOUT_BATCH: ComparisonLevel
COMPARISON_LEVEL_AGGREGATE: ComparisonLevel

class Violation(_message.Message):
    __slots__ = ("rule", "file", "line", "record_id", "message", "severity")
    class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SEVERITY_UNSPECIFIED: _ClassVar[Violation.Severity]
        SEVERITY_ERROR: _ClassVar[Violation.Severity]
        SEVERITY_WARNING: _ClassVar[Violation.Severity]
    SEVERITY_UNSPECIFIED: Violation.Severity
    SEVERITY_ERROR: Violation.Severity
    SEVERITY_WARNING: Violation.Severity
    RULE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    rule: str
    file: str
    line: int
    record_id: str
    message: str
    severity: Violation.Severity
    def __init__(self, rule: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ..., record_id: _Optional[str] = ..., message: _Optional[str] = ..., severity: _Optional[_Union[Violation.Severity, str]] = ...) -> None: ...

class TraceCheck(_message.Message):
    __slots__ = ("status", "trace_dir", "violations", "record_counts")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[TraceCheck.Status]
        STATUS_VALID: _ClassVar[TraceCheck.Status]
        STATUS_INVALID: _ClassVar[TraceCheck.Status]
        STATUS_INCOMPLETE: _ClassVar[TraceCheck.Status]
    STATUS_UNSPECIFIED: TraceCheck.Status
    STATUS_VALID: TraceCheck.Status
    STATUS_INVALID: TraceCheck.Status
    STATUS_INCOMPLETE: TraceCheck.Status
    class RecordCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TRACE_DIR_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNTS_FIELD_NUMBER: _ClassVar[int]
    status: TraceCheck.Status
    trace_dir: str
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    record_counts: _containers.ScalarMap[str, int]
    def __init__(self, status: _Optional[_Union[TraceCheck.Status, str]] = ..., trace_dir: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ..., record_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class MetricComparison(_message.Message):
    __slots__ = ("level", "metric", "pairs", "mape_pct", "median_ape_pct", "p90_ape_pct", "signed_bias_pct", "measured_p50_ms", "measured_p90_ms", "measured_p99_ms", "predicted_p50_ms", "predicted_p90_ms", "predicted_p99_ms", "zero_measured", "measured_mean_ms", "predicted_mean_ms", "measured_value", "predicted_value")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    MAPE_PCT_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_APE_PCT_FIELD_NUMBER: _ClassVar[int]
    P90_APE_PCT_FIELD_NUMBER: _ClassVar[int]
    SIGNED_BIAS_PCT_FIELD_NUMBER: _ClassVar[int]
    MEASURED_P50_MS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_P90_MS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_P99_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_P50_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_P90_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ZERO_MEASURED_FIELD_NUMBER: _ClassVar[int]
    MEASURED_MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_VALUE_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_VALUE_FIELD_NUMBER: _ClassVar[int]
    level: ComparisonLevel
    metric: str
    pairs: int
    mape_pct: float
    median_ape_pct: float
    p90_ape_pct: float
    signed_bias_pct: float
    measured_p50_ms: float
    measured_p90_ms: float
    measured_p99_ms: float
    predicted_p50_ms: float
    predicted_p90_ms: float
    predicted_p99_ms: float
    zero_measured: int
    measured_mean_ms: float
    predicted_mean_ms: float
    measured_value: float
    predicted_value: float
    def __init__(self, level: _Optional[_Union[ComparisonLevel, str]] = ..., metric: _Optional[str] = ..., pairs: _Optional[int] = ..., mape_pct: _Optional[float] = ..., median_ape_pct: _Optional[float] = ..., p90_ape_pct: _Optional[float] = ..., signed_bias_pct: _Optional[float] = ..., measured_p50_ms: _Optional[float] = ..., measured_p90_ms: _Optional[float] = ..., measured_p99_ms: _Optional[float] = ..., predicted_p50_ms: _Optional[float] = ..., predicted_p90_ms: _Optional[float] = ..., predicted_p99_ms: _Optional[float] = ..., zero_measured: _Optional[int] = ..., measured_mean_ms: _Optional[float] = ..., predicted_mean_ms: _Optional[float] = ..., measured_value: _Optional[float] = ..., predicted_value: _Optional[float] = ...) -> None: ...

class NotCompared(_message.Message):
    __slots__ = ("level", "metric", "record_id", "reason")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    level: ComparisonLevel
    metric: str
    record_id: str
    reason: str
    def __init__(self, level: _Optional[_Union[ComparisonLevel, str]] = ..., metric: _Optional[str] = ..., record_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RepeatSpread(_message.Message):
    __slots__ = ("level", "metric", "repeats", "cv_pct", "max_dev_pct")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    CV_PCT_FIELD_NUMBER: _ClassVar[int]
    MAX_DEV_PCT_FIELD_NUMBER: _ClassVar[int]
    level: ComparisonLevel
    metric: str
    repeats: int
    cv_pct: float
    max_dev_pct: float
    def __init__(self, level: _Optional[_Union[ComparisonLevel, str]] = ..., metric: _Optional[str] = ..., repeats: _Optional[int] = ..., cv_pct: _Optional[float] = ..., max_dev_pct: _Optional[float] = ...) -> None: ...

class ValidationReport(_message.Message):
    __slots__ = ("schema_version", "trace_id", "role", "workload_name", "simulator", "timing_model", "granularity", "metrics", "not_compared", "repeat_spread", "capture_overhead", "label", "artifacts", "requests_unavailable", "notes")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_NAME_FIELD_NUMBER: _ClassVar[int]
    SIMULATOR_FIELD_NUMBER: _ClassVar[int]
    TIMING_MODEL_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    NOT_COMPARED_FIELD_NUMBER: _ClassVar[int]
    REPEAT_SPREAD_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    trace_id: str
    role: _common_pb2.WorkloadRole
    workload_name: str
    simulator: _replay_pb2.SimulatorIdentity
    timing_model: _replay_pb2.TimingModel
    granularity: _replay_pb2.ResultGranularity
    metrics: _containers.RepeatedCompositeFieldContainer[MetricComparison]
    not_compared: _containers.RepeatedCompositeFieldContainer[NotCompared]
    repeat_spread: _containers.RepeatedCompositeFieldContainer[RepeatSpread]
    capture_overhead: _manifest_pb2.CaptureOverhead
    label: str
    artifacts: _containers.RepeatedScalarFieldContainer[str]
    requests_unavailable: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, schema_version: _Optional[str] = ..., trace_id: _Optional[str] = ..., role: _Optional[_Union[_common_pb2.WorkloadRole, str]] = ..., workload_name: _Optional[str] = ..., simulator: _Optional[_Union[_replay_pb2.SimulatorIdentity, _Mapping]] = ..., timing_model: _Optional[_Union[_replay_pb2.TimingModel, _Mapping]] = ..., granularity: _Optional[_Union[_replay_pb2.ResultGranularity, str]] = ..., metrics: _Optional[_Iterable[_Union[MetricComparison, _Mapping]]] = ..., not_compared: _Optional[_Iterable[_Union[NotCompared, _Mapping]]] = ..., repeat_spread: _Optional[_Iterable[_Union[RepeatSpread, _Mapping]]] = ..., capture_overhead: _Optional[_Union[_manifest_pb2.CaptureOverhead, _Mapping]] = ..., label: _Optional[str] = ..., artifacts: _Optional[_Iterable[str]] = ..., requests_unavailable: _Optional[int] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...
