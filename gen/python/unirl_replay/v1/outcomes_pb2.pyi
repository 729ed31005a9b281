from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutcomeRecord(_message.Message):
    __slots__ = ("request", "trajectory", "group", "rollout_batch")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_BATCH_FIELD_NUMBER: _ClassVar[int]
    request: RequestOutcome
    trajectory: TrajectoryOutcome
    group: GroupOutcome
    rollout_batch: BatchOutcome
    def __init__(self, request: _Optional[_Union[RequestOutcome, _Mapping]] = ..., trajectory: _Optional[_Union[TrajectoryOutcome, _Mapping]] = ..., group: _Optional[_Union[GroupOutcome, _Mapping]] = ..., rollout_batch: _Optional[_Union[BatchOutcome, _Mapping]] = ...) -> None: ...

class RequestOutcome(_message.Message):
    __slots__ = ("request_id", "submit_ns", "queued_ns", "scheduled_ns", "first_token_ns", "completion_ns", "cached_tokens", "unavailable_reason", "samples")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_NS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_NS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_NS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_NS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_NS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    submit_ns: int
    queued_ns: int
    scheduled_ns: int
    first_token_ns: int
    completion_ns: int
    cached_tokens: int
    unavailable_reason: str
    samples: _containers.RepeatedCompositeFieldContainer[SampleTiming]
    def __init__(self, request_id: _Optional[str] = ..., submit_ns: _Optional[int] = ..., queued_ns: _Optional[int] = ..., scheduled_ns: _Optional[int] = ..., first_token_ns: _Optional[int] = ..., completion_ns: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., unavailable_reason: _Optional[str] = ..., samples: _Optional[_Iterable[_Union[SampleTiming, _Mapping]]] = ...) -> None: ...

class SampleTiming(_message.Message):
    __slots__ = ("sample_id", "first_token_ns", "completion_ns")
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_NS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_NS_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    first_token_ns: int
    completion_ns: int
    def __init__(self, sample_id: _Optional[str] = ..., first_token_ns: _Optional[int] = ..., completion_ns: _Optional[int] = ...) -> None: ...

class TrajectoryOutcome(_message.Message):
    __slots__ = ("trajectory_id", "slot_acquired_ns", "slot_released_ns", "tool_durations_ns")
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_ACQUIRED_NS_FIELD_NUMBER: _ClassVar[int]
    SLOT_RELEASED_NS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DURATIONS_NS_FIELD_NUMBER: _ClassVar[int]
    trajectory_id: str
    slot_acquired_ns: int
    slot_released_ns: int
    tool_durations_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, trajectory_id: _Optional[str] = ..., slot_acquired_ns: _Optional[int] = ..., slot_released_ns: _Optional[int] = ..., tool_durations_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class GroupOutcome(_message.Message):
    __slots__ = ("group_id", "completed_ns")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_NS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    completed_ns: int
    def __init__(self, group_id: _Optional[str] = ..., completed_ns: _Optional[int] = ...) -> None: ...

class BatchOutcome(_message.Message):
    __slots__ = ("rollout_batch_id", "ready_ns")
    ROLLOUT_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    READY_NS_FIELD_NUMBER: _ClassVar[int]
    rollout_batch_id: str
    ready_ns: int
    def __init__(self, rollout_batch_id: _Optional[str] = ..., ready_ns: _Optional[int] = ...) -> None: ...
