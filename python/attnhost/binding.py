"""Bindings: the selected plugins opened on their devices, and the per-step
plan and forward calls."""

from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from . import _ffi
from ._dlpack import OwnedTensor, Tensor, capsule, dl_dtype_name
from ._handle import Handle
from .cp import CpGroup
from .errors import InvalidArgumentError, error_for
from .model import DTYPES
from .selection import PHASES, Selection, phase_index

if TYPE_CHECKING:
    from .batch import Batch
    from .host import Host

_MODES = {"eager": 0, "capture": 1, "replay": 2}
_HELD = (Tensor, OwnedTensor)


@dataclass(frozen=True)
class KVCacheDesc:
    """One KV-cache tensor as a layer's plugins need it
    (ah_kv_cache_desc): shape and strides in elements, outermost first.

    ``dtype`` is the DLPack element type by NumPy name ("float32",
    "bfloat16", "uint8" for FP8); ``kv_dtype`` the attnhost one ("fp32",
    "fp8_e4m3", ...). The memory to allocate (ABI 2.3) is the dense
    ``alloc_shape``, with this tensor ``offset`` elements into it; an
    interleaved layout's value has ``in_key_alloc`` set: it is a view into
    the key's allocation, not one of its own.
    """

    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str
    kv_dtype: str
    dl_dtype: Tuple[int, int]   # (DLPack type code, bits)
    alloc_shape: Tuple[int, ...] = ()
    offset: int = 0
    in_key_alloc: bool = False

    @property
    def itemsize(self) -> int:
        return self.dl_dtype[1] // 8

    @property
    def nbytes(self) -> int:
        """Bytes spanned by the tensor."""
        if not self.shape or 0 in self.shape:
            return 0
        return (1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))) * self.itemsize


class Split(NamedTuple):
    """How the last planned batch was served (ah_binding_split)."""

    decode_reqs: int     # leading requests planned on the decode winners
    decode_tokens: int   # their tokens
    why: str             # why decode requests ran on the prefill winners, or ""


class KVGroup(NamedTuple):
    """One KV-cache group of a bound model (ABI 2.1): its layers share one
    block table, block size and cache size (docs/configuration.md,
    "KV-cache groups and released blocks")."""

    index: int
    layers: Tuple[int, ...]  # the group's layers that have a cache
    block_size: int          # tokens per block, the same for all its layers
    release_window: int      # the smallest sliding window of its layers: a
    #                          block wholly before a request's first query
    #                          minus this may be released; 0: none may be


class DeviceInfo(NamedTuple):
    """The device of a bound plugin."""

    kind: str            # "cpu", "cuda", "hip", "level_zero"
    dl_device: Tuple[int, int]  # (DLPack device type, index)


# ah_mixed_steps by name; None: the host's [select] mixed_steps.
_MIXED_STEPS = {None: 0, "split": 1, "whole": 2, "measured": 3}

class Binding(Handle):
    """The selected plugins opened for one engine worker (ah_binding).

    Args:
        host, selection: the selection's host and the selection to bind.
        max_num_reqs, max_num_tokens, max_blocks_per_req, max_seq_len,
            num_blocks: the engine's maxima (ah_limits), fixed for the
            binding's life.
        validate: check every batch and tensor before a plugin sees it
            (False: trusted engines; errors then go unreported).
        device_index: the device (of each bound plugin's kind) to run on.
        cp: context parallelism (ABI 2.2): this binding's rank of a group
            (:class:`CpGroup`); its batches then carry the rank's shard of
            the KV cache (see :class:`BatchBuilder`), and plan and forward
            are collective: every rank of the group calls them, each from
            its own thread or process. None: no context parallelism.
        mixed_steps: how steps of decode and prefill requests run where a
            layer's two winners differ: "split", "whole" or "measured" (as
            [select] mixed_steps), for this binding alone; None: as the
            host's configuration says.

    Owner-thread object: one call at a time (a second thread's concurrent
    call raises RuntimeError); many bindings may run at once on one host.
    Keeps its selection and host alive, and its cp group's
    :class:`LocalCpGroup` or :class:`NcclComms`.
    """

    def __init__(self, host: "Host", selection: Selection, *, max_num_reqs: int,
                 max_num_tokens: int, max_blocks_per_req: int, max_seq_len: int,
                 num_blocks: int, validate: bool = True, device_index: int = 0,
                 cp: Optional[CpGroup] = None, mixed_steps: Optional[str] = None) -> None:
        lib = _ffi.load()
        if selection.host is not host:
            raise ValueError("the selection was made by another host")
        if mixed_steps not in _MIXED_STEPS:
            raise ValueError(f"mixed_steps {mixed_steps!r}: not one of split, whole, measured "
                             "or None")
        lim = _ffi.ah_limits(ctypes.sizeof(_ffi.ah_limits), max_num_reqs, max_num_tokens,
                             max_blocks_per_req, max_seq_len, num_blocks)
        o = _ffi.ah_binding_options()
        o.struct_size = ctypes.sizeof(o)
        o.limits = lim
        o.no_validation = 0 if validate else 1
        o.device_index = device_index
        o.mixed_steps = _MIXED_STEPS[mixed_steps]
        parents: Tuple[Handle, ...] = (selection, host)
        self._cp_c: Any = None
        if cp is not None:
            cpo, cp_parents, keep = cp._to_c()
            o.cp = ctypes.pointer(cpo)
            parents += cp_parents
            self._cp_c = (cpo, keep)
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_binding_create(host._handle(), selection._handle(), ctypes.byref(o),
                                   ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        self._adopt(out.value, lib.ah_binding_destroy, parents)
        self.cp = cp
        self.host = host
        self.selection = selection
        self.limits = {"max_num_reqs": max_num_reqs, "max_num_tokens": max_num_tokens,
                       "max_blocks_per_req": max_blocks_per_req, "max_seq_len": max_seq_len,
                       "num_blocks": num_blocks}
        self.validate = validate
        self.num_layers = selection.num_layers
        self._lib = lib
        self._fwd = lib.ah_binding_forward
        self._plan = lib.ah_binding_plan
        self._errmsg = lib.ah_binding_errmsg
        self._args = _ffi.ah_forward_args()
        self._args.struct_size = ctypes.sizeof(_ffi.ah_forward_args)
        self._args_addr = ctypes.addressof(self._args)
        self._busy = threading.Lock()
        self._batch: Optional["Batch"] = None
        self._cpu = all(self.device(l, p).kind == "cpu"
                        for l in range(self.num_layers) for p in (0, 1))
        self._groups: Optional[Tuple[KVGroup, ...]] = None

    # -- description ------------------------------------------------------

    def device(self, layer: int, phase="prefill") -> DeviceInfo:
        """The device of the plugin bound to layer in phase."""
        d = self._device_ptr(layer, phase)
        dl = self._lib.ah_device_dl(d)
        return DeviceInfo(_ffi.s(self._lib.ah_device_kind_str(self._lib.ah_device_kind_of(d))),
                          (int(dl.device_type), int(dl.device_id)))

    def _device_ptr(self, layer: int, phase="prefill") -> int:
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer}: the binding has {self.num_layers} layers")
        d = self._lib.ah_binding_device(self._handle(), layer, phase_index(phase))
        if not d:
            raise InvalidArgumentError(1, f"layer {layer}: no device bound")
        return d

    @property
    def kv_groups(self) -> Tuple[KVGroup, ...]:
        """The model's KV-cache groups, group g at index g: one for a model
        that declares none. Layers without a cache (encoder, non-attention)
        belong to none; a layer's group is its spec's ``kv_group``."""
        if self._groups is None:
            members: Dict[int, List[int]] = {}
            for l in range(self.num_layers):
                d = self.selection.decision(l)
                if d.kind == "attention" and d.spec.attn_type not in ("encoder", "encoder_only"):
                    members.setdefault(d.spec.kv_group, []).append(l)
            groups = []
            for g in range(1 + max(members, default=0)):
                layers = members.get(g, [])
                specs = [self.selection.decision(l, p).spec for l in layers for p in PHASES]
                window = min((s.sliding_window if s.attn_type == "decoder" else 0
                              for s in specs), default=0)
                groups.append(KVGroup(g, tuple(layers), specs[0].block_size if specs else 0,
                                      window))
            self._groups = tuple(groups)
        return self._groups

    @property
    def num_kv_groups(self) -> int:
        """len(kv_groups): what ah_batch.num_kv_groups must be when above 1."""
        return len(self.kv_groups)

    def kv_cache_desc(self, layer: int, num_blocks: Optional[int] = None
                      ) -> Tuple[KVCacheDesc, Optional[KVCacheDesc]]:
        """The (key, value) cache tensors layer needs for num_blocks blocks
        (default: the binding's num_blocks); value is None for MLA."""
        nb = self.limits["num_blocks"] if num_blocks is None else num_blocks
        k, v = _ffi.ah_kv_cache_desc(), _ffi.ah_kv_cache_desc()
        k.struct_size = v.struct_size = ctypes.sizeof(_ffi.ah_kv_cache_desc)
        st = self._lib.ah_binding_kv_cache_desc(self._handle(), layer, nb, ctypes.byref(k),
                                                ctypes.byref(v))
        if st:
            raise error_for(st, _ffi.s(self._errmsg(self._handle())))

        def conv(d: _ffi.ah_kv_cache_desc) -> Optional[KVCacheDesc]:
            if d.ndim == 0:
                return None
            return KVCacheDesc(tuple(d.shape[: d.ndim]), tuple(d.strides[: d.ndim]),
                               dl_dtype_name(d.dl_dtype.code, d.dl_dtype.bits),
                               DTYPES[d.kv_dtype] if 0 <= d.kv_dtype < len(DTYPES) else "?",
                               (d.dl_dtype.code, d.dl_dtype.bits),
                               tuple(d.alloc_shape[: d.alloc_ndim]), int(d.offset),
                               bool(d.in_key_alloc))

        return conv(k), conv(v)  # type: ignore[return-value]

    def block_size(self, layer: int, phase: str = "prefill") -> Tuple[int, int]:
        """(cache block, kernel block) of layer (ABI 2.3): the block size its
        block table and slot mapping count in (the model's, or what
        ``block_size = auto`` resolved to), and the one the plugin bound for
        phase runs on (smaller when the host splits each cache block)."""
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer}: the binding has {self.num_layers} layers")
        kernel = ctypes.c_uint32(0)
        bs = self._lib.ah_binding_block_size(self._handle(), layer, phase_index(phase),
                                             ctypes.byref(kernel))
        if not bs:
            raise InvalidArgumentError(1, f"layer {layer}: not an attention layer")
        return int(bs), int(kernel.value)

    @property
    def phase(self) -> str:
        """"decode" when every request of the last planned batch was a
        decode request, else "prefill"."""
        return PHASES[self._lib.ah_binding_phase(self._handle())]

    @property
    def split(self) -> Split:
        """How the last planned batch was split between the decode and the
        prefill winners."""
        toks, why = ctypes.c_uint32(0), ctypes.c_char_p()
        n = self._lib.ah_binding_split(self._handle(), ctypes.byref(toks), ctypes.byref(why))
        return Split(int(n), int(toks.value), _ffi.s(why.value))

    # -- per step ---------------------------------------------------------

    def _enter(self) -> int:
        p = self._ptr
        if p is None or self._closing:
            raise ValueError("Binding is closed")
        if not self._busy.acquire(False):
            raise RuntimeError("Binding used from two threads at once: a binding is an "
                               "owner-thread object (make one binding per worker thread)")
        return p

    def plan(self, batch: "Batch", mode: str = "eager", stream: Optional[int] = None) -> None:
        """Validate the batch (unless validate=False), split it by phase and
        plan every bound state. The binding holds the batch (and so its
        arrays) until the next plan. On error nothing was planned.

        Under context parallelism every rank plans its own batch of the
        same requests at once; when one rank's batch is wrong, every
        rank's plan raises (the wrong rank's message names the request)."""
        m = _MODES.get(mode)
        if m is None:
            raise ValueError(f"mode = {mode!r}: expected eager, capture or replay")
        if stream is None:
            stream = batch._default_stream()
        p = self._enter()
        try:
            st = self._plan(p, batch._addr, m, stream)
            if st:
                raise error_for(st, _ffi.s(self._errmsg(p)))
            self._batch = batch
        finally:
            self._busy.release()

    def forward(self, layer: int, q: Any, key: Any, value: Any, key_cache: Any,
                value_cache: Any, out: Any, lse: Any = None, sinks: Any = None,
                alibi_slopes: Any = None, k_scale: float = 0.0, v_scale: float = 0.0,
                stream: Optional[int] = None, k_scale_tensor: Any = None,
                v_scale_tensor: Any = None, q_scale: float = 0.0,
                q_scale_tensor: Any = None) -> None:
        """Attention for layer over the last planned batch: stores the new
        tokens' key/value (unless key is None) and writes out [T, Hq, v_head]
        (lse [T, Hq] float32 when given).

        Tensors are anything with ``__dlpack__`` (NumPy, torch, CuPy) or
        :class:`attnhost.Tensor` (imported once, e.g. the caches of a
        :class:`PagedKVCache`). value and value_cache are None for MLA. For
        torch CUDA tensors the current stream is used when stream is None.
        Errors raise :class:`AttnhostError` naming the tensor and value;
        nothing is written then.

        FP8 scales (docs/python.md, "FP8 scales"): under the layer's
        ``kv_scales = "host"`` pass k_scale / v_scale as floats (0 means 1);
        under ``"tensor"`` or ``"per_head"`` pass k_scale_tensor /
        v_scale_tensor instead, float32 tensors of shape [1] or
        [num_kv_heads] on the cache's device, which the kernels read when
        they run (a CUDA graph replays with the values they hold then:
        update them in place, e.g. ``k_scale_tensor.copy_(new)``). A layer
        with ``q_scale = True`` takes q_scale (host) or q_scale_tensor ([1]).

        Under context parallelism every rank calls forward for the same
        layer with the same q, key and value (all of the step's tokens);
        each stores only the tokens its slot mapping places on it, and
        every rank's out receives the whole result.
        """
        p = self._enter()
        try:
            if stream is None and not self._cpu:
                stream = _stream_for(q)
            dl_stream = None if self._cpu else stream
            keep = []
            a = self._args
            a.q = _imp(q, keep, dl_stream)
            a.key = _imp(key, keep, dl_stream)
            a.value = _imp(value, keep, dl_stream)
            a.key_cache = _imp(key_cache, keep, dl_stream)
            a.value_cache = _imp(value_cache, keep, dl_stream)
            a.out = _imp(out, keep, dl_stream)
            a.lse = _imp(lse, keep, dl_stream)
            a.sinks = _imp(sinks, keep, dl_stream)
            a.alibi_slopes = _imp(alibi_slopes, keep, dl_stream)
            a.k_scale = k_scale
            a.v_scale = v_scale
            a.stream = stream
            a.k_scale_tensor = _imp(k_scale_tensor, keep, dl_stream)
            a.v_scale_tensor = _imp(v_scale_tensor, keep, dl_stream)
            a.q_scale = q_scale
            a.q_scale_tensor = _imp(q_scale_tensor, keep, dl_stream)
            st = self._fwd(p, layer, self._args_addr)
            if st:
                raise error_for(st, _ffi.s(self._errmsg(p)))
        finally:
            self._busy.release()

    def __repr__(self) -> str:
        if self.closed:
            return "attnhost.Binding(closed)"
        cp = "" if self.cp is None else f", cp rank {self.cp.rank} of {self.cp.world_size}"
        return f"attnhost.Binding({self.num_layers} layers, limits={self.limits}{cp})"


def _imp(x: Any, keep: list, stream: Optional[int]) -> Optional[int]:
    """The DLTensor address of x, keeping its capsule in keep."""
    if x is None:
        return None
    if type(x) in _HELD:
        return x.ptr
    if stream is not None and x.__dlpack_device__()[0] == _ffi.kDLCPU:
        stream = None  # host tensors take no stream
    cap, ptr = capsule(x, stream)
    keep.append(cap)
    return ptr


def _stream_for(x: Any) -> Optional[int]:
    """The current torch CUDA stream when x is a torch CUDA tensor."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
        return int(torch.cuda.current_stream(x.device).cuda_stream)
    return None
