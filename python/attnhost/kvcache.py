"""Paged KV caches allocated as the binding's plugins ask."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._dlpack import OwnedTensor, Tensor
from .binding import Binding, KVCacheDesc

# DLPack dtype name -> NumPy dtype name of the array we hand out (NumPy has
# no bfloat16: such caches are uint16 arrays behind a bfloat16 DLTensor).
_NP_VIEW = {"float32": "float32", "float16": "float16", "bfloat16": "uint16", "uint8": "uint8"}
_ALIGN = 256


def aligned_empty(nbytes: int, align: int = _ALIGN):
    """A NumPy uint8 buffer of nbytes whose data address is align-aligned."""
    import numpy as np

    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off: off + nbytes]


def group_counts(binding: Binding, num_blocks: Union[None, int, Sequence[int]],
                 who: str) -> Tuple[int, ...]:
    """Blocks per KV-cache group: the binding's num_blocks for every group
    (None), one count for every group (an int), or one count per group."""
    G = binding.num_kv_groups
    if num_blocks is None:
        num_blocks = binding.limits["num_blocks"]
    if not hasattr(num_blocks, "__iter__"):
        return (operator.index(num_blocks),) * G
    counts = tuple(int(n) for n in num_blocks)
    if len(counts) != G:
        raise ValueError(f"{who}: num_blocks has {len(counts)} entries, but the model has {G} "
                         f"KV-cache group{'s' if G > 1 else ''}: give one count per group")
    for g, n in enumerate(counts):
        if n < 1:
            raise ValueError(f"{who}: num_blocks[{g}] = {n} (kv group {g}): must be >= 1")
    return counts


class PagedKVCache:
    """Each layer's key and value caches, with the shape, strides and dtype
    the binding asks for (:meth:`Binding.kv_cache_desc`).

    Args:
        binding: the binding whose plugins will read the caches.
        num_blocks: blocks per cache (default: the binding's num_blocks);
            for a model of several KV-cache groups (``binding.kv_groups``)
            also a sequence of one count per group, each layer's cache
            then having its group's count (in its group's block size).
        layers: the layers to allocate (default: all).
        allocator: "numpy" (host memory; CPU plugins) or "torch" (on the
            device each layer is bound to: cuda:N for CUDA plugins).
        zero: fill with zeros (else the memory is uninitialised).

    ``key(l)`` / ``value(l)`` are the arrays (NumPy: bfloat16 caches show as
    uint16, FP8 as uint8); ``tensors(l)`` are the same memory as held
    :class:`attnhost.Tensor` objects with the exact DLPack dtype, to pass to
    :meth:`Binding.forward` without a per-call import. ``group_num_blocks``
    holds the blocks of each group's caches; ``num_blocks`` is group 0's.
    """

    def __init__(self, binding: Binding, num_blocks: Optional[int] = None,
                 layers: Optional[Sequence[int]] = None, allocator: str = "numpy",
                 zero: bool = True) -> None:
        if allocator not in ("numpy", "torch"):
            raise ValueError(f"allocator = {allocator!r}: expected numpy or torch")
        self.binding = binding
        self.group_num_blocks = group_counts(binding, num_blocks, "PagedKVCache")
        self.num_blocks = self.group_num_blocks[0]
        self.layers = list(range(binding.num_layers)) if layers is None else list(layers)
        self.allocator = allocator
        self._arrays: Dict[int, Tuple[Any, Any]] = {}
        self._tensors: Dict[int, Tuple[Any, Any]] = {}
        self.descs: Dict[int, Tuple[KVCacheDesc, Optional[KVCacheDesc]]] = {}
        for l in self.layers:
            g = binding.selection.decision(l).spec.kv_group
            kd, vd = binding.kv_cache_desc(l, self.group_num_blocks[g])
            self.descs[l] = (kd, vd)
            dev = binding.device(l, "prefill")
            k = self._alloc(kd, dev, zero)
            v = (self._view(vd, k) if vd is not None and vd.in_key_alloc
                 else self._alloc(vd, dev, zero) if vd is not None else (None, None))
            self._arrays[l] = (k[0], v[0])
            self._tensors[l] = (k[1], v[1])

    def _view(self, d: KVCacheDesc, key):
        """The value of an interleaved layout: d's view into the key's
        allocation (key as _alloc returned it), offset elements in."""
        arr, t = key
        if self.allocator == "numpy":
            import numpy as np

            base = t.keep
            view = np.lib.stride_tricks.as_strided(
                base[d.offset * d.itemsize:].view(_NP_VIEW[d.dtype]), shape=d.shape,
                strides=tuple(s * d.itemsize for s in d.strides))
            return view, OwnedTensor(base.ctypes.data + d.offset * d.itemsize,
                                     (_ffi.kDLCPU, 0), d.dl_dtype, d.shape, base,
                                     strides=d.strides)
        import torch

        v = torch.as_strided(arr, d.shape, d.strides, arr.storage_offset() + d.offset)
        return v, Tensor(v)

    def _alloc(self, d: KVCacheDesc, dev, zero: bool):
        if self.allocator == "numpy":
            import numpy as np

            if dev.kind != "cpu":
                raise ValueError(f"allocator='numpy' gives host memory; the layer is bound to a "
                                 f"{dev.kind} device: use allocator='torch'")
            # the whole allocation (an interleaved layout's [nb, 2, ...]),
            # so the value's view lies inside it
            span = d.nbytes if not d.alloc_shape else d.itemsize * _prod(d.alloc_shape)
            buf = aligned_empty(span)
            if zero:
                buf[:] = 0
            view = np.lib.stride_tricks.as_strided(
                buf.view(_NP_VIEW[d.dtype]), shape=d.shape,
                strides=tuple(s * d.itemsize for s in d.strides))
            t = OwnedTensor(buf.ctypes.data, (_ffi.kDLCPU, 0), d.dl_dtype, d.shape, buf,
                            strides=d.strides)
            return view, t
        import torch

        tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "uint8": torch.uint8}[d.dtype]
        device = "cpu" if dev.kind == "cpu" else f"cuda:{dev.dl_device[1]}"
        if d.alloc_shape:  # the whole allocation, the tensor a view into it
            base = torch.empty(d.alloc_shape, dtype=tdt, device=device)
            if zero:
                base.zero_()
            arr = torch.as_strided(base, d.shape, d.strides, d.offset)
        else:
            arr = torch.empty_strided(d.shape, d.strides, dtype=tdt, device=device)
            if zero:
                arr.zero_()
        return arr, Tensor(arr)

    def key(self, layer: int) -> Any:
        """The layer's key cache array."""
        return self._arrays[layer][0]

    def value(self, layer: int) -> Any:
        """The layer's value cache array (None for MLA)."""
        return self._arrays[layer][1]

    def kv_group(self, layer: int) -> int:
        """The KV-cache group of layer (its spec's kv_group)."""
        return self.binding.selection.decision(layer).spec.kv_group

    def tensors(self, layer: int) -> Tuple[Any, Any]:
        """(key_cache, value_cache) as held tensors for Binding.forward."""
        return self._tensors[layer]

    @property
    def nbytes(self) -> int:
        return sum(kd.nbytes + (vd.nbytes if vd else 0) for kd, vd in self.descs.values())


def _prod(shape) -> int:
    n = 1
    for x in shape:
        n *= x
    return n

    def __repr__(self) -> str:
        nb = self.num_blocks if len(set(self.group_num_blocks)) == 1 else self.group_num_blocks
        return (f"attnhost.PagedKVCache({len(self.layers)} layers, {nb} blocks, "
                f"{self.nbytes / 2**20:.1f} MiB, {self.allocator})")
