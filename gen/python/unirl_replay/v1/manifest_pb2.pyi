from unirl_replay.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArtifactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_KIND_UNSPECIFIED: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_WORKLOAD: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_OUTCOMES: _ClassVar[ArtifactKind]

class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENCODING_UNSPECIFIED: _ClassVar[Encoding]
    ENCODING_JSONL: _ClassVar[Encoding]
    ENCODING_BINPB: _ClassVar[Encoding]
    ENCODING_ARROW: _ClassVar[Encoding]
ARTIFACT_KIND_UNSPECIFIED: ArtifactKind
ARTIFACT_KIND_WORKLOAD: ArtifactKind
ARTIFACT_KIND_OUTCOMES: ArtifactKind
ENCODING_UNSPECIFIED: Encoding
ENCODING_JSONL: Encoding
ENCODING_BINPB: Encoding
ENCODING_ARROW: Encoding

class TraceManifest(_message.Message):
    __slots__ = ("schema_version", "trace_id", "producer", "provenance", "model", "engines", "hardware", "policy", "window", "privacy", "capture_overhead", "role", "workload_name", "artifacts", "cache_state", "created_at", "labels", "contract_revision", "conditions", "probes", "completeness")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_NAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_REVISION_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    COMPLETENESS_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    trace_id: str
    producer: Producer
    provenance: Provenance
    model: ModelIdentity
    engines: _containers.RepeatedCompositeFieldContainer[EngineConfig]
    hardware: Hardware
    policy: PolicyIdentity
    window: CaptureWindow
    privacy: Privacy
    capture_overhead: CaptureOverhead
    role: _common_pb2.WorkloadRole
    workload_name: str
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactDigest]
    cache_state: _common_pb2.CacheStateKind
    created_at: str
    labels: _containers.ScalarMap[str, str]
    contract_revision: int
    conditions: RunConditions
    probes: _containers.RepeatedCompositeFieldContainer[ReferenceProbe]
    completeness: CaptureCompleteness
    def __init__(self, schema_version: _Optional[str] = ..., trace_id: _Optional[str] = ..., producer: _Optional[_Union[Producer, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., model: _Optional[_Union[ModelIdentity, _Mapping]] = ..., engines: _Optional[_Iterable[_Union[EngineConfig, _Mapping]]] = ..., hardware: _Optional[_Union[Hardware, _Mapping]] = ..., policy: _Optional[_Union[PolicyIdentity, _Mapping]] = ..., window: _Optional[_Union[CaptureWindow, _Mapping]] = ..., privacy: _Optional[_Union[Privacy, _Mapping]] = ..., capture_overhead: _Optional[_Union[CaptureOverhead, _Mapping]] = ..., role: _Optional[_Union[_common_pb2.WorkloadRole, str]] = ..., workload_name: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactDigest, _Mapping]]] = ..., cache_state: _Optional[_Union[_common_pb2.CacheStateKind, str]] = ..., created_at: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., contract_revision: _Optional[int] = ..., conditions: _Optional[_Union[RunConditions, _Mapping]] = ..., probes: _Optional[_Iterable[_Union[ReferenceProbe, _Mapping]]] = ..., completeness: _Optional[_Union[CaptureCompleteness, _Mapping]] = ...) -> None: ...

class RunConditions(_message.Message):
    __slots__ = ("cpu_model", "cpu_count", "worker_threads", "loadavg_1m_start", "loadavg_1m_end", "steal_pct", "host_busy_pct", "engine_process_cpu_ns", "engine_uptime_ns", "cache_state", "duration_ns", "cpu_signature")
    class WorkerThreadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EngineProcessCpuNsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    WORKER_THREADS_FIELD_NUMBER: _ClassVar[int]
    LOADAVG_1M_START_FIELD_NUMBER: _ClassVar[int]
    LOADAVG_1M_END_FIELD_NUMBER: _ClassVar[int]
    STEAL_PCT_FIELD_NUMBER: _ClassVar[int]
    HOST_BUSY_PCT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_PROCESS_CPU_NS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_UPTIME_NS_FIELD_NUMBER: _ClassVar[int]
    CACHE_STATE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    cpu_model: str
    cpu_count: int
    worker_threads: _containers.ScalarMap[str, str]
    loadavg_1m_start: float
    loadavg_1m_end: float
    steal_pct: float
    host_busy_pct: float
    engine_process_cpu_ns: _containers.ScalarMap[str, int]
    engine_uptime_ns: int
    cache_state: _common_pb2.CacheStateKind
    duration_ns: int
    cpu_signature: CpuSignature
    def __init__(self, cpu_model: _Optional[str] = ..., cpu_count: _Optional[int] = ..., worker_threads: _Optional[_Mapping[str, str]] = ..., loadavg_1m_start: _Optional[float] = ..., loadavg_1m_end: _Optional[float] = ..., steal_pct: _Optional[float] = ..., host_busy_pct: _Optional[float] = ..., engine_process_cpu_ns: _Optional[_Mapping[str, int]] = ..., engine_uptime_ns: _Optional[int] = ..., cache_state: _Optional[_Union[_common_pb2.CacheStateKind, str]] = ..., duration_ns: _Optional[int] = ..., cpu_signature: _Optional[_Union[CpuSignature, _Mapping]] = ...) -> None: ...

class CpuSignature(_message.Message):
    __slots__ = ("vendor_id", "cpu_family", "model", "stepping", "microcode", "flags_digest", "isa_flags", "isa_flags_checked")
    VENDOR_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_FAMILY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STEPPING_FIELD_NUMBER: _ClassVar[int]
    MICROCODE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ISA_FLAGS_FIELD_NUMBER: _ClassVar[int]
    ISA_FLAGS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    vendor_id: str
    cpu_family: int
    model: int
    stepping: int
    microcode: str
    flags_digest: str
    isa_flags: _containers.RepeatedScalarFieldContainer[str]
    isa_flags_checked: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, vendor_id: _Optional[str] = ..., cpu_family: _Optional[int] = ..., model: _Optional[int] = ..., stepping: _Optional[int] = ..., microcode: _Optional[str] = ..., flags_digest: _Optional[str] = ..., isa_flags: _Optional[_Iterable[str]] = ..., isa_flags_checked: _Optional[_Iterable[str]] = ...) -> None: ...

class ReferenceProbe(_message.Message):
    __slots__ = ("engine_id", "when", "points", "artifact_path", "conditions", "contended_points", "contended_load")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PATH_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_POINTS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_LOAD_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    when: str
    points: _containers.RepeatedCompositeFieldContainer[ProbePoint]
    artifact_path: str
    conditions: RunConditions
    contended_points: _containers.RepeatedCompositeFieldContainer[ProbePoint]
    contended_load: str
    def __init__(self, engine_id: _Optional[str] = ..., when: _Optional[str] = ..., points: _Optional[_Iterable[_Union[ProbePoint, _Mapping]]] = ..., artifact_path: _Optional[str] = ..., conditions: _Optional[_Union[RunConditions, _Mapping]] = ..., contended_points: _Optional[_Iterable[_Union[ProbePoint, _Mapping]]] = ..., contended_load: _Optional[str] = ...) -> None: ...

class ProbePoint(_message.Message):
    __slots__ = ("phase", "batch_size", "context_tokens", "prefill_tokens", "repeats", "median_ms", "p25_ms", "p75_ms", "unusable_repeats", "repeat_step_ms", "repeat_pass_tokens", "repeat_pass_rows", "step_ms", "passes")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_MS_FIELD_NUMBER: _ClassVar[int]
    P25_MS_FIELD_NUMBER: _ClassVar[int]
    P75_MS_FIELD_NUMBER: _ClassVar[int]
    UNUSABLE_REPEATS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_STEP_MS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_PASS_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_PASS_ROWS_FIELD_NUMBER: _ClassVar[int]
    STEP_MS_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    phase: str
    batch_size: int
    context_tokens: int
    prefill_tokens: int
    repeats: int
    median_ms: float
    p25_ms: float
    p75_ms: float
    unusable_repeats: int
    repeat_step_ms: _containers.RepeatedScalarFieldContainer[float]
    repeat_pass_tokens: _containers.RepeatedScalarFieldContainer[int]
    repeat_pass_rows: _containers.RepeatedScalarFieldContainer[int]
    step_ms: _containers.RepeatedScalarFieldContainer[float]
    passes: _containers.RepeatedCompositeFieldContainer[ProbePass]
    def __init__(self, phase: _Optional[str] = ..., batch_size: _Optional[int] = ..., context_tokens: _Optional[int] = ..., prefill_tokens: _Optional[int] = ..., repeats: _Optional[int] = ..., median_ms: _Optional[float] = ..., p25_ms: _Optional[float] = ..., p75_ms: _Optional[float] = ..., unusable_repeats: _Optional[int] = ..., repeat_step_ms: _Optional[_Iterable[float]] = ..., repeat_pass_tokens: _Optional[_Iterable[int]] = ..., repeat_pass_rows: _Optional[_Iterable[int]] = ..., step_ms: _Optional[_Iterable[float]] = ..., passes: _Optional[_Iterable[_Union[ProbePass, _Mapping]]] = ...) -> None: ...

class ProbePass(_message.Message):
    __slots__ = ("usable", "rows", "tokens", "ms")
    USABLE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    usable: bool
    rows: int
    tokens: int
    ms: float
    def __init__(self, usable: _Optional[bool] = ..., rows: _Optional[int] = ..., tokens: _Optional[int] = ..., ms: _Optional[float] = ...) -> None: ...

class ReferenceProbeArtifact(_message.Message):
    __slots__ = ("schema", "role", "engine_id", "when", "probe_id", "method", "window_offset_s", "probe_wall_s", "points", "requests", "contended_method", "contended_points", "contended_verdicts", "contended_requests", "contended_loads")
    class ContendedLoadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ProbeCalls
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ProbeCalls, _Mapping]] = ...) -> None: ...
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    WINDOW_OFFSET_S_FIELD_NUMBER: _ClassVar[int]
    PROBE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_METHOD_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_POINTS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_VERDICTS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CONTENDED_LOADS_FIELD_NUMBER: _ClassVar[int]
    schema: str
    role: str
    engine_id: str
    when: str
    probe_id: str
    method: str
    window_offset_s: float
    probe_wall_s: float
    points: _containers.RepeatedCompositeFieldContainer[ProbePoint]
    requests: _containers.RepeatedCompositeFieldContainer[ProbeCall]
    contended_method: str
    contended_points: _containers.RepeatedCompositeFieldContainer[ProbePoint]
    contended_verdicts: _containers.RepeatedCompositeFieldContainer[ProbeVerdict]
    contended_requests: _containers.RepeatedCompositeFieldContainer[ProbeCall]
    contended_loads: _containers.MessageMap[str, ProbeCalls]
    def __init__(self, schema: _Optional[str] = ..., role: _Optional[str] = ..., engine_id: _Optional[str] = ..., when: _Optional[str] = ..., probe_id: _Optional[str] = ..., method: _Optional[str] = ..., window_offset_s: _Optional[float] = ..., probe_wall_s: _Optional[float] = ..., points: _Optional[_Iterable[_Union[ProbePoint, _Mapping]]] = ..., requests: _Optional[_Iterable[_Union[ProbeCall, _Mapping]]] = ..., contended_method: _Optional[str] = ..., contended_points: _Optional[_Iterable[_Union[ProbePoint, _Mapping]]] = ..., contended_verdicts: _Optional[_Iterable[_Union[ProbeVerdict, _Mapping]]] = ..., contended_requests: _Optional[_Iterable[_Union[ProbeCall, _Mapping]]] = ..., contended_loads: _Optional[_Mapping[str, ProbeCalls]] = ...) -> None: ...

class ProbeCall(_message.Message):
    __slots__ = ("point", "repeat", "round", "call_monotonic", "requests")
    POINT_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CALL_MONOTONIC_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    point: str
    repeat: int
    round: str
    call_monotonic: _containers.RepeatedScalarFieldContainer[float]
    requests: _containers.RepeatedCompositeFieldContainer[ProbeRequestTiming]
    def __init__(self, point: _Optional[str] = ..., repeat: _Optional[int] = ..., round: _Optional[str] = ..., call_monotonic: _Optional[_Iterable[float]] = ..., requests: _Optional[_Iterable[_Union[ProbeRequestTiming, _Mapping]]] = ...) -> None: ...

class ProbeRequestTiming(_message.Message):
    __slots__ = ("scheduled_ts", "first_token_ts", "last_token_ts", "output_tokens")
    SCHEDULED_TS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_TS_FIELD_NUMBER: _ClassVar[int]
    LAST_TOKEN_TS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    scheduled_ts: float
    first_token_ts: float
    last_token_ts: float
    output_tokens: int
    def __init__(self, scheduled_ts: _Optional[float] = ..., first_token_ts: _Optional[float] = ..., last_token_ts: _Optional[float] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class ProbeVerdict(_message.Message):
    __slots__ = ("point", "repeat", "round", "used", "reason", "interval")
    POINT_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    point: str
    repeat: int
    round: str
    used: bool
    reason: str
    interval: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, point: _Optional[str] = ..., repeat: _Optional[int] = ..., round: _Optional[str] = ..., used: _Optional[bool] = ..., reason: _Optional[str] = ..., interval: _Optional[_Iterable[float]] = ...) -> None: ...

class ProbeCalls(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ProbeCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[ProbeCall, _Mapping]]] = ...) -> None: ...

class CaptureCompleteness(_message.Message):
    __slots__ = ("complete", "lost")
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    complete: bool
    lost: _containers.RepeatedCompositeFieldContainer[LostRecords]
    def __init__(self, complete: _Optional[bool] = ..., lost: _Optional[_Iterable[_Union[LostRecords, _Mapping]]] = ...) -> None: ...

class LostRecords(_message.Message):
    __slots__ = ("kind", "count", "cause")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    count: int
    cause: str
    def __init__(self, kind: _Optional[str] = ..., count: _Optional[int] = ..., cause: _Optional[str] = ...) -> None: ...

class Producer(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("unirl_version", "unirl_commit", "inference_backend", "inference_backend_version", "simulator_name", "simulator_version", "packages")
    class PackagesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UNIRL_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNIRL_COMMIT_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_BACKEND_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_BACKEND_VERSION_FIELD_NUMBER: _ClassVar[int]
    SIMULATOR_NAME_FIELD_NUMBER: _ClassVar[int]
    SIMULATOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    PACKAGES_FIELD_NUMBER: _ClassVar[int]
    unirl_version: str
    unirl_commit: str
    inference_backend: str
    inference_backend_version: str
    simulator_name: str
    simulator_version: str
    packages: _containers.ScalarMap[str, str]
    def __init__(self, unirl_version: _Optional[str] = ..., unirl_commit: _Optional[str] = ..., inference_backend: _Optional[str] = ..., inference_backend_version: _Optional[str] = ..., simulator_name: _Optional[str] = ..., simulator_version: _Optional[str] = ..., packages: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ModelIdentity(_message.Message):
    __slots__ = ("name", "architecture", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size", "intermediate_size", "weights_sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    INTERMEDIATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    intermediate_size: int
    weights_sha256: str
    def __init__(self, name: _Optional[str] = ..., architecture: _Optional[str] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., vocab_size: _Optional[int] = ..., intermediate_size: _Optional[int] = ..., weights_sha256: _Optional[str] = ...) -> None: ...

class EngineConfig(_message.Message):
    __slots__ = ("engine_id", "worker_ids", "tp_size", "block_size_tokens", "num_kv_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "enable_prefix_caching", "enable_chunked_prefill", "dtype", "extra")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    TP_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    ENABLE_PREFIX_CACHING_FIELD_NUMBER: _ClassVar[int]
    ENABLE_CHUNKED_PREFILL_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    worker_ids: _containers.RepeatedScalarFieldContainer[str]
    tp_size: int
    block_size_tokens: int
    num_kv_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    dtype: str
    extra: _containers.ScalarMap[str, str]
    def __init__(self, engine_id: _Optional[str] = ..., worker_ids: _Optional[_Iterable[str]] = ..., tp_size: _Optional[int] = ..., block_size_tokens: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., max_num_batched_tokens: _Optional[int] = ..., max_model_len: _Optional[int] = ..., enable_prefix_caching: _Optional[bool] = ..., enable_chunked_prefill: _Optional[bool] = ..., dtype: _Optional[str] = ..., extra: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Hardware(_message.Message):
    __slots__ = ("description", "accelerator", "accelerator_count", "cpu_model", "cpu_count", "memory_bytes")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    description: str
    accelerator: str
    accelerator_count: int
    cpu_model: str
    cpu_count: int
    memory_bytes: int
    def __init__(self, description: _Optional[str] = ..., accelerator: _Optional[str] = ..., accelerator_count: _Optional[int] = ..., cpu_model: _Optional[str] = ..., cpu_count: _Optional[int] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class PolicyIdentity(_message.Message):
    __slots__ = ("policy_version", "checkpoint")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    checkpoint: str
    def __init__(self, policy_version: _Optional[int] = ..., checkpoint: _Optional[str] = ...) -> None: ...

class CaptureWindow(_message.Message):
    __slots__ = ("start_unix_ns", "duration_ns", "clock_domain")
    START_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    start_unix_ns: int
    duration_ns: int
    clock_domain: _common_pb2.ClockDomain
    def __init__(self, start_unix_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ..., clock_domain: _Optional[_Union[_common_pb2.ClockDomain, str]] = ...) -> None: ...

class Privacy(_message.Message):
    __slots__ = ("content", "hash_salt_id", "hash_algorithm")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    HASH_SALT_ID_FIELD_NUMBER: _ClassVar[int]
    HASH_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    content: _common_pb2.ContentPolicy
    hash_salt_id: str
    hash_algorithm: str
    def __init__(self, content: _Optional[_Union[_common_pb2.ContentPolicy, str]] = ..., hash_salt_id: _Optional[str] = ..., hash_algorithm: _Optional[str] = ...) -> None: ...

class CaptureOverhead(_message.Message):
    __slots__ = ("overhead_ratio", "instrumented_wall_ns", "plain_wall_ns", "pairs", "method")
    OVERHEAD_RATIO_FIELD_NUMBER: _ClassVar[int]
    INSTRUMENTED_WALL_NS_FIELD_NUMBER: _ClassVar[int]
    PLAIN_WALL_NS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    overhead_ratio: float
    instrumented_wall_ns: int
    plain_wall_ns: int
    pairs: int
    method: str
    def __init__(self, overhead_ratio: _Optional[float] = ..., instrumented_wall_ns: _Optional[int] = ..., plain_wall_ns: _Optional[int] = ..., pairs: _Optional[int] = ..., method: _Optional[str] = ...) -> None: ...

class ArtifactDigest(_message.Message):
    __slots__ = ("kind", "path", "encoding", "sha256", "record_count", "size_bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: ArtifactKind
    path: str
    encoding: Encoding
    sha256: str
    record_count: int
    size_bytes: int
    def __init__(self, kind: _Optional[_Union[ArtifactKind, str]] = ..., path: _Optional[str] = ..., encoding: _Optional[_Union[Encoding, str]] = ..., sha256: _Optional[str] = ..., record_count: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...
