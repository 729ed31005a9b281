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

class StepPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_PHASE_UNSPECIFIED: _ClassVar[StepPhase]
    STEP_PHASE_FIRST_PASS: _ClassVar[StepPhase]
    STEP_PHASE_PREFILL: _ClassVar[StepPhase]
    STEP_PHASE_DECODE: _ClassVar[StepPhase]
COMPARISON_LEVEL_UNSPECIFIED: ComparisonLevel
COMPARISON_LEVEL_REQUEST: ComparisonLevel
COMPARISON_LEVEL_GROUP: ComparisonLevel
COMPARISON_LEVEL_TRAJECTORY: ComparisonLevel
COMPARISON_LEVEL_ROLLOUT_BATCH: ComparisonLevel
COMPARISON_LEVEL_AGGREGATE: ComparisonLevel
STEP_PHASE_UNSPECIFIED: StepPhase
STEP_PHASE_FIRST_PASS: StepPhase
STEP_PHASE_PREFILL: StepPhase
STEP_PHASE_DECODE: StepPhase

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
    __slots__ = ("schema_version", "trace_id", "role", "workload_name", "simulator", "timing_model", "granularity", "metrics", "not_compared", "repeat_spread", "capture_overhead", "label", "artifacts", "requests_unavailable", "notes", "engine_steps", "profile_check", "decompositions", "workload_requests", "workload_samples", "brackets", "condition_warnings")
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
    ENGINE_STEPS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_CHECK_FIELD_NUMBER: _ClassVar[int]
    DECOMPOSITIONS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    BRACKETS_FIELD_NUMBER: _ClassVar[int]
    CONDITION_WARNINGS_FIELD_NUMBER: _ClassVar[int]
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
    engine_steps: _containers.RepeatedCompositeFieldContainer[EngineSteps]
    profile_check: ProfileCheck
    decompositions: _containers.RepeatedCompositeFieldContainer[ErrorDecomposition]
    workload_requests: int
    workload_samples: int
    brackets: _containers.RepeatedCompositeFieldContainer[UnmodelledBracket]
    condition_warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, schema_version: _Optional[str] = ..., trace_id: _Optional[str] = ..., role: _Optional[_Union[_common_pb2.WorkloadRole, str]] = ..., workload_name: _Optional[str] = ..., simulator: _Optional[_Union[_replay_pb2.SimulatorIdentity, _Mapping]] = ..., timing_model: _Optional[_Union[_replay_pb2.TimingModel, _Mapping]] = ..., granularity: _Optional[_Union[_replay_pb2.ResultGranularity, str]] = ..., metrics: _Optional[_Iterable[_Union[MetricComparison, _Mapping]]] = ..., not_compared: _Optional[_Iterable[_Union[NotCompared, _Mapping]]] = ..., repeat_spread: _Optional[_Iterable[_Union[RepeatSpread, _Mapping]]] = ..., capture_overhead: _Optional[_Union[_manifest_pb2.CaptureOverhead, _Mapping]] = ..., label: _Optional[str] = ..., artifacts: _Optional[_Iterable[str]] = ..., requests_unavailable: _Optional[int] = ..., notes: _Optional[_Iterable[str]] = ..., engine_steps: _Optional[_Iterable[_Union[EngineSteps, _Mapping]]] = ..., profile_check: _Optional[_Union[ProfileCheck, _Mapping]] = ..., decompositions: _Optional[_Iterable[_Union[ErrorDecomposition, _Mapping]]] = ..., workload_requests: _Optional[int] = ..., workload_samples: _Optional[int] = ..., brackets: _Optional[_Iterable[_Union[UnmodelledBracket, _Mapping]]] = ..., condition_warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class EngineStep(_message.Message):
    __slots__ = ("index", "segment", "phase", "end_ns", "prefill_sequences", "prefill_tokens", "decode_sequences", "kv_tokens", "mean_context_tokens", "model_ms", "rollout_batch_ids")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DECODE_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    KV_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MEAN_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_MS_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    index: int
    segment: int
    phase: StepPhase
    end_ns: int
    prefill_sequences: int
    prefill_tokens: int
    decode_sequences: int
    kv_tokens: int
    mean_context_tokens: float
    model_ms: float
    rollout_batch_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., segment: _Optional[int] = ..., phase: _Optional[_Union[StepPhase, str]] = ..., end_ns: _Optional[int] = ..., prefill_sequences: _Optional[int] = ..., prefill_tokens: _Optional[int] = ..., decode_sequences: _Optional[int] = ..., kv_tokens: _Optional[int] = ..., mean_context_tokens: _Optional[float] = ..., model_ms: _Optional[float] = ..., rollout_batch_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class StepInterval(_message.Message):
    __slots__ = ("segment", "first_step", "last_step", "start_ns", "end_ns", "phase", "real_ms", "model_ms", "decode_sequences", "prefill_tokens")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REAL_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    segment: int
    first_step: int
    last_step: int
    start_ns: int
    end_ns: int
    phase: StepPhase
    real_ms: float
    model_ms: float
    decode_sequences: int
    prefill_tokens: int
    def __init__(self, segment: _Optional[int] = ..., first_step: _Optional[int] = ..., last_step: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., phase: _Optional[_Union[StepPhase, str]] = ..., real_ms: _Optional[float] = ..., model_ms: _Optional[float] = ..., decode_sequences: _Optional[int] = ..., prefill_tokens: _Optional[int] = ...) -> None: ...

class StepCheck(_message.Message):
    __slots__ = ("name", "passed", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    passed: bool
    detail: str
    def __init__(self, name: _Optional[str] = ..., passed: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class EngineSteps(_message.Message):
    __slots__ = ("engine_id", "unavailable_reason", "steps", "intervals", "checks", "samples", "notes")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    unavailable_reason: str
    steps: _containers.RepeatedCompositeFieldContainer[EngineStep]
    intervals: _containers.RepeatedCompositeFieldContainer[StepInterval]
    checks: _containers.RepeatedCompositeFieldContainer[StepCheck]
    samples: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, engine_id: _Optional[str] = ..., unavailable_reason: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[EngineStep, _Mapping]]] = ..., intervals: _Optional[_Iterable[_Union[StepInterval, _Mapping]]] = ..., checks: _Optional[_Iterable[_Union[StepCheck, _Mapping]]] = ..., samples: _Optional[int] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class PhaseRatio(_message.Message):
    __slots__ = ("phase", "intervals", "steps", "median_ratio", "p25_ratio", "p75_ratio", "total_ratio", "real_ms", "model_ms")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_RATIO_FIELD_NUMBER: _ClassVar[int]
    P25_RATIO_FIELD_NUMBER: _ClassVar[int]
    P75_RATIO_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RATIO_FIELD_NUMBER: _ClassVar[int]
    REAL_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_MS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    intervals: int
    steps: int
    median_ratio: float
    p25_ratio: float
    p75_ratio: float
    total_ratio: float
    real_ms: float
    model_ms: float
    def __init__(self, phase: _Optional[str] = ..., intervals: _Optional[int] = ..., steps: _Optional[int] = ..., median_ratio: _Optional[float] = ..., p25_ratio: _Optional[float] = ..., p75_ratio: _Optional[float] = ..., total_ratio: _Optional[float] = ..., real_ms: _Optional[float] = ..., model_ms: _Optional[float] = ...) -> None: ...

class ProfileCheck(_message.Message):
    __slots__ = ("unavailable_reason", "timing_model", "phases", "profile_spread", "reading")
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMING_MODEL_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SPREAD_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    unavailable_reason: str
    timing_model: str
    phases: _containers.RepeatedCompositeFieldContainer[PhaseRatio]
    profile_spread: str
    reading: str
    def __init__(self, unavailable_reason: _Optional[str] = ..., timing_model: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[PhaseRatio, _Mapping]]] = ..., profile_spread: _Optional[str] = ..., reading: _Optional[str] = ...) -> None: ...

class DecompositionTerm(_message.Message):
    __slots__ = ("name", "delta_ns", "pct_of_measured", "what")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DELTA_NS_FIELD_NUMBER: _ClassVar[int]
    PCT_OF_MEASURED_FIELD_NUMBER: _ClassVar[int]
    WHAT_FIELD_NUMBER: _ClassVar[int]
    name: str
    delta_ns: int
    pct_of_measured: float
    what: str
    def __init__(self, name: _Optional[str] = ..., delta_ns: _Optional[int] = ..., pct_of_measured: _Optional[float] = ..., what: _Optional[str] = ...) -> None: ...

class ErrorDecomposition(_message.Message):
    __slots__ = ("level", "metric", "record_id", "measured_ns", "predicted_ns", "total_ns", "terms", "unavailable_reason", "notes")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    MEASURED_NS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_NS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NS_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    level: ComparisonLevel
    metric: str
    record_id: str
    measured_ns: int
    predicted_ns: int
    total_ns: int
    terms: _containers.RepeatedCompositeFieldContainer[DecompositionTerm]
    unavailable_reason: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, level: _Optional[_Union[ComparisonLevel, str]] = ..., metric: _Optional[str] = ..., record_id: _Optional[str] = ..., measured_ns: _Optional[int] = ..., predicted_ns: _Optional[int] = ..., total_ns: _Optional[int] = ..., terms: _Optional[_Iterable[_Union[DecompositionTerm, _Mapping]]] = ..., unavailable_reason: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class UnmodelledBracket(_message.Message):
    __slots__ = ("rule", "level", "metric", "bounds", "reading", "measured_mean_ms", "records", "records_inside")
    RULE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    MEASURED_MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_INSIDE_FIELD_NUMBER: _ClassVar[int]
    rule: str
    level: ComparisonLevel
    metric: str
    bounds: _containers.RepeatedCompositeFieldContainer[BracketBound]
    reading: str
    measured_mean_ms: float
    records: int
    records_inside: int
    def __init__(self, rule: _Optional[str] = ..., level: _Optional[_Union[ComparisonLevel, str]] = ..., metric: _Optional[str] = ..., bounds: _Optional[_Iterable[_Union[BracketBound, _Mapping]]] = ..., reading: _Optional[str] = ..., measured_mean_ms: _Optional[float] = ..., records: _Optional[int] = ..., records_inside: _Optional[int] = ...) -> None: ...

class BracketBound(_message.Message):
    __slots__ = ("name", "replay_result", "mean_ms", "signed_bias_pct")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLAY_RESULT_FIELD_NUMBER: _ClassVar[int]
    MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    SIGNED_BIAS_PCT_FIELD_NUMBER: _ClassVar[int]
    name: str
    replay_result: str
    mean_ms: float
    signed_bias_pct: float
    def __init__(self, name: _Optional[str] = ..., replay_result: _Optional[str] = ..., mean_ms: _Optional[float] = ..., signed_bias_pct: _Optional[float] = ...) -> None: ...
