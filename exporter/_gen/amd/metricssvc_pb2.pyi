from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GPUState(_message.Message):
    __slots__ = ("ID", "UUID", "Health", "AssociatedWorkload", "Device")
    ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATEDWORKLOAD_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ID: str
    UUID: str
    Health: str
    AssociatedWorkload: _containers.RepeatedScalarFieldContainer[str]
    Device: str
    def __init__(self, ID: _Optional[str] = ..., UUID: _Optional[str] = ..., Health: _Optional[str] = ..., AssociatedWorkload: _Optional[_Iterable[str]] = ..., Device: _Optional[str] = ...) -> None: ...

class GPUStateResponse(_message.Message):
    __slots__ = ("GPUState",)
    GPUSTATE_FIELD_NUMBER: _ClassVar[int]
    GPUState: _containers.RepeatedCompositeFieldContainer[GPUState]
    def __init__(self, GPUState: _Optional[_Iterable[_Union[GPUState, _Mapping]]] = ...) -> None: ...

class GPUGetRequest(_message.Message):
    __slots__ = ("ID",)
    ID_FIELD_NUMBER: _ClassVar[int]
    ID: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ID: _Optional[_Iterable[str]] = ...) -> None: ...
