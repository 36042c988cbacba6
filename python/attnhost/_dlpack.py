"""Borrowing tensors through the DLPack protocol, without copies.

``x.__dlpack__()`` hands out a capsule named "dltensor" holding a
``DLManagedTensor*``. We read the pointer and leave the capsule unconsumed:
the producer keeps ownership, and the capsule's destructor (run when the
capsule is collected) calls the tensor's deleter. A :class:`Tensor` keeps
the capsule and the source object alive for as long as it lives, so the C
side may read the memory while the :class:`Tensor` exists.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Tuple

from . import _ffi

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DLTENSOR = b"dltensor"

_DL_NAMES = {
    (_ffi.kDLFloat, 64): "float64", (_ffi.kDLFloat, 32): "float32",
    (_ffi.kDLFloat, 16): "float16", (_ffi.kDLBfloat, 16): "bfloat16",
    (_ffi.kDLInt, 64): "int64", (_ffi.kDLInt, 32): "int32", (_ffi.kDLInt, 16): "int16",
    (_ffi.kDLInt, 8): "int8", (_ffi.kDLUInt, 8): "uint8", (_ffi.kDLUInt, 16): "uint16",
    (_ffi.kDLUInt, 32): "uint32", (_ffi.kDLUInt, 64): "uint64",
}


def dl_dtype_name(code: int, bits: int, lanes: int = 1) -> str:
    """NumPy-style name of a DLPack dtype ("float32", "bfloat16", "uint8")."""
    n = _DL_NAMES.get((code, bits), f"dl({code},{bits})")
    return n if lanes == 1 else f"{n}x{lanes}"


def _cuda_stream_of(obj: Any) -> Optional[int]:
    """The current CUDA stream of a torch CUDA tensor's device, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    return None


def capsule(obj: Any, stream: Optional[int] = None) -> Tuple[Any, int]:
    """(capsule, DLManagedTensor address) of obj, borrowed: keep the capsule
    alive while the address is in use. stream: the consumer's stream for
    device tensors (DLPack's ``__dlpack__(stream=...)``); CPU tensors never
    receive one."""
    try:
        if stream is None:
            cap = obj.__dlpack__()
        else:
            # DLPack forbids 0 for CUDA (ambiguous); the CUDA runtime's 0 is
            # the legacy default stream, which DLPack calls 1
            cap = obj.__dlpack__(stream=stream or 1)
    except AttributeError:
        raise TypeError(
            f"{type(obj).__name__} does not implement the DLPack protocol (__dlpack__); pass a "
            "NumPy array (numpy >= 1.22), a torch tensor, a CuPy array or an attnhost.Tensor"
        ) from None
    return cap, _get_pointer(cap, _DLTENSOR)


class Tensor:
    """A tensor borrowed through DLPack and held for the C side.

    ``Tensor(x)`` imports once; pass the result wherever the API takes a
    tensor to skip the import on every call (the KV caches of
    :class:`~attnhost.PagedKVCache` are held this way). The source object
    and its capsule stay alive as long as this object does.
    """

    __slots__ = ("source", "_capsule", "ptr", "__weakref__")

    def __init__(self, obj: Any, stream: Optional[int] = None) -> None:
        if isinstance(obj, Tensor):
            self.source, self._capsule, self.ptr = obj.source, obj._capsule, obj.ptr
            return
        self.source = obj
        self._capsule, self.ptr = capsule(obj, stream)

    @property
    def dl(self) -> _ffi.DLTensor:
        """The DLTensor (a view into the producer's struct)."""
        return _ffi.DLTensor.from_address(self.ptr)

    @property
    def shape(self) -> Tuple[int, ...]:
        t = self.dl
        return tuple(t.shape[i] for i in range(t.ndim))

    @property
    def strides(self) -> Optional[Tuple[int, ...]]:
        t = self.dl
        return tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None

    @property
    def dtype(self) -> str:
        d = self.dl.dtype
        return dl_dtype_name(d.code, d.bits, d.lanes)

    @property
    def device(self) -> Tuple[int, int]:
        d = self.dl.device
        return (int(d.device_type), int(d.device_id))

    @property
    def data_ptr(self) -> int:
        t = self.dl
        return (t.data or 0) + t.byte_offset

    def __repr__(self) -> str:
        return f"attnhost.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class OwnedTensor:
    """A DLTensor this package owns (shape and strides arrays included),
    pointing into memory that ``keep`` keeps alive. Its shape may change
    between steps (the batch's views) without a new import."""

    __slots__ = ("t", "shape", "strides", "keep", "ptr")

    def __init__(self, data: int, device: Tuple[int, int], dtype: Tuple[int, int],
                 shape: Tuple[int, ...], keep: Any,
                 strides: Optional[Tuple[int, ...]] = None) -> None:
        n = len(shape)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.t = _ffi.DLTensor()
        self.t.data = data
        self.t.device = _ffi.DLDevice(device[0], device[1])
        self.t.ndim = n
        self.t.dtype = _ffi.DLDataType(dtype[0], dtype[1], 1)  # (code, bits)
        self.t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if strides is None:
            self.strides = None
            self.t.strides = None  # compact, row-major
        else:
            self.strides = (ctypes.c_int64 * n)(*strides)
            self.t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        self.t.byte_offset = 0
        self.keep = keep
        self.ptr = ctypes.addressof(self.t)
