from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ClockDomain(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOCK_DOMAIN_UNSPECIFIED: _ClassVar[ClockDomain]
    CLOCK_DOMAIN_CAPTURE_MONOTONIC: _ClassVar[ClockDomain]
    CLOCK_DOMAIN_SIMULATED: _ClassVar[ClockDomain]

class WorkloadRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKLOAD_ROLE_UNSPECIFIED: _ClassVar[WorkloadRole]
    WORKLOAD_ROLE_UNLABELLED: _ClassVar[WorkloadRole]
    WORKLOAD_ROLE_CALIBRATION: _ClassVar[WorkloadRole]
    WORKLOAD_ROLE_HOLDOUT: _ClassVar[WorkloadRole]

class DependencyTrigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPENDENCY_TRIGGER_UNSPECIFIED: _ClassVar[DependencyTrigger]
    DEPENDENCY_TRIGGER_COMPLETION: _ClassVar[DependencyTrigger]
    DEPENDENCY_TRIGGER_DISPATCH: _ClassVar[DependencyTrigger]

class DependencyRelation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPENDENCY_RELATION_UNSPECIFIED: _ClassVar[DependencyRelation]
    DEPENDENCY_RELATION_SEQUENCE: _ClassVar[DependencyRelation]
    DEPENDENCY_RELATION_SPAWN: _ClassVar[DependencyRelation]
    DEPENDENCY_RELATION_JOIN: _ClassVar[DependencyRelation]

class DelayAbsence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELAY_ABSENCE_UNSPECIFIED: _ClassVar[DelayAbsence]
    DELAY_ABSENCE_NOT_MEASURED: _ClassVar[DelayAbsence]
    DELAY_ABSENCE_NONE_BY_CONSTRUCTION: _ClassVar[DelayAbsence]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
    FINISH_REASON_OTHER: _ClassVar[FinishReason]

class ContentPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTENT_POLICY_UNSPECIFIED: _ClassVar[ContentPolicy]
    CONTENT_POLICY_EXCLUDED: _ClassVar[ContentPolicy]

class CacheStateKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_STATE_KIND_UNSPECIFIED: _ClassVar[CacheStateKind]
    CACHE_STATE_KIND_COLD: _ClassVar[CacheStateKind]
    CACHE_STATE_KIND_WARM_DECLARED: _ClassVar[CacheStateKind]
CLOCK_DOMAIN_UNSPECIFIED: ClockDomain
CLOCK_DOMAIN_CAPTURE_MONOTONIC: ClockDomain
CLOCK_DOMAIN_SIMULATED: ClockDomain
WORKLOAD_ROLE_UNSPECIFIED: WorkloadRole
WORKLOAD_ROLE_UNLABELLED: WorkloadRole
WORKLOAD_ROLE_CALIBRATION: WorkloadRole
WORKLOAD_ROLE_HOLDOUT: WorkloadRole
DEPENDENCY_TRIGGER_UNSPECIFIED: DependencyTrigger
DEPENDENCY_TRIGGER_COMPLETION: DependencyTrigger
DEPENDENCY_TRIGGER_DISPATCH: DependencyTrigger
DEPENDENCY_RELATION_UNSPECIFIED: DependencyRelation
DEPENDENCY_RELATION_SEQUENCE: DependencyRelation
DEPENDENCY_RELATION_SPAWN: DependencyRelation
DEPENDENCY_RELATION_JOIN: DependencyRelation
DELAY_ABSENCE_UNSPECIFIED: DelayAbsence
DELAY_ABSENCE_NOT_MEASURED: DelayAbsence
DELAY_ABSENCE_NONE_BY_CONSTRUCTION: DelayAbsence
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason
FINISH_REASON_OTHER: FinishReason
CONTENT_POLICY_UNSPECIFIED: ContentPolicy
CONTENT_POLICY_EXCLUDED: ContentPolicy
CACHE_STATE_KIND_UNSPECIFIED: CacheStateKind
CACHE_STATE_KIND_COLD: CacheStateKind
CACHE_STATE_KIND_WARM_DECLARED: CacheStateKind

class PrefixBlocks(_message.Message):
    __slots__ = ("block_size_tokens", "block_hashes")
    BLOCK_SIZE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_size_tokens: int
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_size_tokens: _Optional[int] = ..., block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...
