"""Context parallelism (ABI 2.2): a request's KV cache sharded by position
over the ranks of a group, as attnhost.h's "Context parallelism" block
describes.

KV position p lives on rank ``(p // interleave) % world_size``, at index
``(p // (interleave * world_size)) * interleave + p % interleave`` of that
rank's shard. A :class:`Binding` made with ``cp=CpGroup(...)`` attends over
its rank's shard, all-gathers the partial outputs over the group's
collective and merges them, so every rank ends with the whole result. The
collective is a :class:`LocalCpGroup` (ranks emulated by threads of this
process) or an NCCL communicator: the engine's own, or one of
:class:`NcclComms` (every rank driven from this process).

The layout helpers call the library's own (``ah_cp_rank_of``,
``ah_cp_local_len``); the batch builder's vectorised copies of them
(:func:`_locate`, :func:`_local_lens`) are checked against those in the
tests.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._handle import Handle
from .errors import error_for

if TYPE_CHECKING:
    import numpy

_WHAT = "context parallelism"


def _nonneg(name: str, v: int) -> int:
    # ctypes would wrap a negative value into a huge unsigned one
    v = int(v)
    if v < 0:
        raise ValueError(f"{name} = {v}: must be >= 0")
    return v


def _lib() -> ctypes.CDLL:
    return _ffi.require(2, "ah_cp_local_len", _WHAT)


def cp_rank_of(pos: int, world_size: int, interleave: int = 1) -> int:
    """The rank holding KV position pos in a group of world_size ranks
    (ah_cp_rank_of; interleave 0 means 1)."""
    return int(_lib().ah_cp_rank_of(_nonneg("pos", pos), _nonneg("world_size", world_size),
                                    _nonneg("interleave", interleave), None))


def cp_local_index(pos: int, world_size: int, interleave: int = 1) -> int:
    """The index of KV position pos in its rank's shard (ah_cp_rank_of's
    local): the engine's slot of pos on that rank is its block table's
    ``table[index // block_size] * block_size + index % block_size``."""
    local = ctypes.c_uint64()
    _lib().ah_cp_rank_of(_nonneg("pos", pos), _nonneg("world_size", world_size),
                         _nonneg("interleave", interleave), ctypes.byref(local))
    return int(local.value)


def cp_local_len(n: int, world_size: int, rank: int, interleave: int = 1) -> int:
    """How many of positions 0 .. n - 1 rank holds: its local length of a
    request of n tokens (ah_cp_local_len)."""
    return int(_lib().ah_cp_local_len(_nonneg("n", n), _nonneg("world_size", world_size),
                                      _nonneg("rank", rank), _nonneg("interleave", interleave)))


def _locate(pos: "numpy.ndarray", world_size: int, interleave: int
            ) -> Tuple["numpy.ndarray", "numpy.ndarray"]:
    """cp_rank_of and cp_local_index over an int64 array of positions."""
    il = max(1, interleave)
    return (pos // il) % world_size, (pos // (il * world_size)) * il + pos % il


def _local_lens(n: "numpy.ndarray", world_size: int, rank: int, interleave: int
                ) -> "numpy.ndarray":
    """cp_local_len over an int64 array of lengths: whole rounds of
    interleave * world_size positions give interleave each, the last
    partial round what reaches past rank * interleave."""
    import numpy as np

    il = max(1, interleave)
    full, rest = np.divmod(n, il * world_size)
    return full * il + np.clip(rest - rank * il, 0, il)


class LocalCpGroup(Handle):
    """Ranks emulated in one process (ah_cp_local_group): an in-memory
    all-gather between the bindings made on it, one per rank, each used
    from its own thread.

    Args:
        world_size: the number of ranks.

    A rank that does not arrive within its time-out (CpGroup.timeout_ms)
    fails every waiting rank with a message, and the group stays failed:
    make a new one. Create and close from one thread. Bindings made on the
    group keep it alive (closing it earlier only marks it); use it as a
    context manager to close it when the bindings are gone.
    """

    def __init__(self, world_size: int) -> None:
        lib = _lib()
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_cp_local_group_create(_nonneg("world_size", world_size),
                                          ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        self._adopt(out.value, lib.ah_cp_local_group_destroy)
        self.world_size = int(world_size)

    def rank(self, rank: int, interleave: int = 1, timeout_ms: int = 0) -> "CpGroup":
        """The :class:`CpGroup` of one rank of this group, for
        ``Binding(..., cp=...)``."""
        return CpGroup(self.world_size, rank, interleave, local_group=self,
                       timeout_ms=timeout_ms)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"world_size={self.world_size}"
        return f"attnhost.LocalCpGroup({state})"


def default_nccl_library() -> Optional[str]:
    """The libnccl.so.2 of the nvidia-nccl wheel (the one torch's CUDA
    builds load) when it is installed, else None: the library then asks
    the dynamic loader for "libnccl.so.2". The communicators and the
    bindings that use them must share one NCCL, so both default to this."""
    for d in sys.path:
        p = Path(d or os.curdir) / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if p.is_file():
            return str(p.resolve())
    return None


@dataclass(frozen=True)
class NcclComm:
    """Rank ``rank`` of an :class:`NcclComms`: pass it as
    ``CpGroup.nccl_comm`` (the binding then keeps the communicators alive)
    or ``int(comm)``, the ``ncclComm_t``, to code that wants the address."""

    comms: "NcclComms"
    rank: int
    ptr: int

    def __int__(self) -> int:
        return self.ptr


class NcclComms(Handle):
    """NCCL communicators for devices of this process (ncclCommInitAll
    through ah_cp_nccl_comms_create), for tools and tests that drive every
    rank from one process; ``comm(i)`` is rank i on ``devices[i]``.

    Args:
        devices: the CUDA device indices, one per rank.
        library: the libnccl.so.2 to load (default:
            :func:`default_nccl_library`).

    Closing destroys every communicator once the bindings made on them are
    gone.
    """

    def __init__(self, devices: Sequence[int], library: Optional[Union[str, "os.PathLike[str]"]]
                 = None) -> None:
        lib = _ffi.require(2, "ah_cp_nccl_comms_create", "NcclComms")
        n = len(devices)
        devs = (ctypes.c_int32 * max(1, n))(*(int(d) for d in devices))
        comms = (ctypes.c_void_p * max(1, n))()
        self.library = default_nccl_library() if library is None else os.fspath(library)
        self.devices = tuple(int(d) for d in devices)
        err = _ffi.ah_error()
        st = lib.ah_cp_nccl_comms_create(n, devs, _bytes(self.library), comms, ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        self._comms: List[int] = [int(comms[i]) for i in range(n)]
        self._adopt(1, self._destroy_all)

    def _destroy_all(self, _ptr: int) -> None:
        lib = _ffi.load()
        for c in self._comms:
            lib.ah_cp_nccl_comm_destroy(c)
        self._comms = []

    def comm(self, i: int) -> NcclComm:
        """Rank i's communicator."""
        self._handle()
        if not 0 <= i < len(self._comms):
            raise IndexError(f"rank {i}: the communicators have {len(self._comms)} ranks")
        return NcclComm(self, i, self._comms[i])

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"devices={list(self.devices)}"
        return f"attnhost.NcclComms({state})"


def _bytes(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else os.fsencode(s)


@dataclass(frozen=True)
class CpGroup:
    """One binding's place in a context-parallel group
    (ah_binding_options.cp), for ``Binding(..., cp=CpGroup(...))``.

    Args:
        world_size: ranks in the group (1: no context parallelism).
        rank: this binding's rank, 0 .. world_size - 1.
        interleave: consecutive KV positions per rank (vLLM's
            cp_kv_cache_interleave_size).
        local_group: the collective when the ranks are threads of this
            process; or
        nccl_comm: the rank's ``ncclComm_t``: an :class:`NcclComm`, or an
            integer for a communicator the engine made (and keeps alive
            while the binding lives).
        nccl_library: the libnccl.so.2 the binding loads; None: the one
            the NcclComm was made with, else :func:`default_nccl_library`.
        timeout_ms: how long a rank waits for the others (0: 60000).

    The library checks the rest (one collective, the rank in range, a
    sliding window a multiple of interleave * world_size) when the binding
    is made, and raises with its message.
    """

    world_size: int
    rank: int
    interleave: int = 1
    local_group: Optional[LocalCpGroup] = None
    nccl_comm: Union[None, int, NcclComm] = None
    nccl_library: Optional[str] = None
    timeout_ms: int = 0

    def _to_c(self) -> Tuple[_ffi.ah_cp_options, Tuple[Handle, ...], Any]:
        """The C options, the handles the binding must keep alive, and the
        Python objects its pointers point into."""
        _lib()
        o = _ffi.ah_cp_options()
        o.struct_size = ctypes.sizeof(o)
        o.world_size = _nonneg("world_size", self.world_size)
        o.rank = _nonneg("rank", self.rank)
        o.interleave = _nonneg("interleave", self.interleave)
        o.timeout_ms = _nonneg("timeout_ms", self.timeout_ms)
        parents: Tuple[Handle, ...] = ()
        if self.local_group is not None:
            o.local_group = self.local_group._handle()
            parents += (self.local_group,)
        library = self.nccl_library
        if isinstance(self.nccl_comm, NcclComm):
            self.nccl_comm.comms._handle()  # raises once the communicators are closed
            o.nccl_comm = self.nccl_comm.ptr
            parents += (self.nccl_comm.comms,)
            if library is None:
                library = self.nccl_comm.comms.library
        elif self.nccl_comm is not None:
            o.nccl_comm = int(self.nccl_comm)
        if self.nccl_comm is not None and library is None:
            library = default_nccl_library()
        lib_bytes = _bytes(library)
        o.nccl_library = lib_bytes
        return o, parents, lib_bytes
