"""Building the per-step batch (ah_batch) from per-request lengths and
block ids, vectorised with NumPy, in buffers reused from step to step."""

from __future__ import annotations

import ctypes
import itertools
import sys
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._dlpack import OwnedTensor
from ._handle import Handle
from .binding import Binding
from .cp import _local_lens, _locate
from .errors import InvalidArgumentError, error_for
from .kvcache import aligned_empty, group_counts


def _bad(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(1, msg)


class Batch:
    """One step's batch: the C struct and the host arrays behind it.

    The arrays are views into the :class:`BatchBuilder`'s buffers: the next
    :meth:`BatchBuilder.build` overwrites them (and returns this same
    object), so build the next step once this one's forwards have completed.
    """

    def __init__(self, builder: "BatchBuilder") -> None:
        self.builder = builder
        self.c = _ffi.ah_batch()
        self.c.struct_size = ctypes.sizeof(_ffi.ah_batch)
        self._addr = ctypes.addressof(self.c)
        self.num_reqs = self.num_tokens = self.max_query_len = self.max_seq_len = 0
        self._cp_given = False

    @property
    def query_start_loc(self):
        return self.builder._qsl[: self.num_reqs + 1]

    @property
    def seq_lens(self):
        return self.builder._seq[: self.num_reqs]

    @property
    def block_table(self):
        return self.builder._table[: self.num_reqs]

    @property
    def slot_mapping(self):
        return self.builder._slots[: self.num_tokens]

    @property
    def num_kv_groups(self) -> int:
        """The binding's KV-cache groups (ah_batch.num_kv_groups is this
        when above 1, else 0)."""
        return len(self.builder.block_sizes)

    @property
    def kv_groups(self) -> Tuple["BatchGroup", ...]:
        """Each group's paging in this batch; group 0's is the batch's own
        block_table and slot_mapping."""
        return tuple(BatchGroup(self, g) for g in range(self.num_kv_groups))

    @property
    def cp_local_seq_lens(self):
        """The local lengths passed to the library under context
        parallelism, or None when it computes them."""
        return self.builder._cpl[: self.num_reqs] if self._cp_given else None

    @property
    def cu_seqlens_k(self):
        """A ragged step's key offsets (ABI 2.3), or None on a paged step."""
        return self.builder._cuk[: self.num_reqs + 1] if self.c.cu_seqlens_k_host else None

    @property
    def query_lens(self):
        import numpy as np

        return np.diff(self.query_start_loc)

    def _default_stream(self) -> Optional[int]:
        return self.builder._stream()

    def __repr__(self) -> str:
        return (f"attnhost.Batch({self.num_reqs} requests, {self.num_tokens} tokens, "
                f"max_seq_len {self.max_seq_len})")


class BatchGroup:
    """One KV-cache group's paging in a :class:`Batch` (an ah_kv_group):
    views into the builder's buffers, like the batch's own arrays."""

    def __init__(self, batch: Batch, index: int) -> None:
        b = batch.builder
        self.index = index
        self.block_size = b.block_sizes[index]
        self.num_blocks = b.group_num_blocks[index]
        self.release_window = b.release_windows[index]
        self.block_table = b._tables[index][: batch.num_reqs]
        self.slot_mapping = b._group_slots[index][: batch.num_tokens]
        self.released = b._released[index]  # entries the last build marked released

    def __repr__(self) -> str:
        return (f"attnhost.BatchGroup({self.index}, block size {self.block_size}, "
                f"{self.num_blocks} blocks, {self.released} released)")


class BatchBuilder(Handle):
    """Builds :class:`Batch` objects for a binding: host arrays
    (query_start_loc, seq_lens, block_table, slot_mapping) computed with
    NumPy and, for device plugins, their device copies, in buffers sized by
    the binding's limits and reused every step.

    Args:
        binding: the binding the batches are planned on.
        num_blocks: blocks in the KV cache (default: the binding's); for a
            model of several KV-cache groups also one count per group
            (``PagedKVCache.group_num_blocks``).
        block_size: tokens per block (default: the selection's, which must
            be one for every layer; with several groups, each group's).

    A model of several KV-cache groups (``binding.num_kv_groups`` > 1, ABI
    2.1) pages each group apart: :meth:`build` takes one block-id table per
    group and fills one ah_kv_group per group, group 0 in the batch's own
    fields. ``block_sizes`` and ``group_num_blocks`` are per group;
    ``block_size`` and ``num_blocks`` are group 0's.

    Device copies live on the device of the first layer bound to a non-CPU
    plugin (allocated and copied through that binding device); on CPU-only
    bindings the device tensors are the host arrays themselves.

    On a binding with context parallelism (``Binding(..., cp=...)``) the
    batches are the rank's: seq_lens stay the requests' whole lengths,
    block_ids cover the rank's shard of each request (its
    :func:`attnhost.cp_local_len`), and the slot mapping gives the rank's
    slot of each new token it holds (:func:`attnhost.cp_rank_of`,
    :func:`attnhost.cp_local_index`) and -1 for the others.
    """

    def __init__(self, binding: Binding, num_blocks: Optional[int] = None,
                 block_size: Optional[int] = None) -> None:
        import numpy as np

        lib = _ffi.load()
        lim = binding.limits
        self.binding = binding
        self.max_num_reqs = R = lim["max_num_reqs"]
        self.max_num_tokens = T = lim["max_num_tokens"]
        self.max_blocks_per_req = MB = lim["max_blocks_per_req"]
        self.max_seq_len = lim["max_seq_len"]
        groups = binding.kv_groups
        G = len(groups)
        try:
            self.group_num_blocks = group_counts(binding, num_blocks, "BatchBuilder")
        except ValueError as e:
            raise _bad(str(e)) from None
        self.num_blocks = self.group_num_blocks[0]
        if G > 1:
            if block_size is None:
                self.block_sizes = tuple(g.block_size for g in groups)
            elif hasattr(block_size, "__iter__") and len(block_size) == G:
                self.block_sizes = tuple(int(b) for b in block_size)
            else:
                raise _bad(f"block_size = {block_size!r}: the model has {G} KV-cache groups; "
                           f"give one block size per group, or None for the groups' own")
        elif block_size is None:
            sizes = {binding.selection.decision(l, p).spec.block_size
                     for l in range(binding.num_layers) for p in (0, 1)}
            if len(sizes) != 1:
                raise _bad(f"block sizes {sorted(sizes)}: one batch serves one block size; "
                           "pass block_size= and bind the other layers apart")
            self.block_sizes = (sizes.pop(),)
        else:
            self.block_sizes = (int(block_size),)
        self.block_size = self.block_sizes[0]
        self.release_windows = tuple(g.release_window for g in groups)

        def buf(n, dt):
            return aligned_empty(max(1, n) * np.dtype(dt).itemsize).view(dt)

        self._qsl = buf(R + 1, np.int32)
        self._seq = buf(R, np.int32)
        self._table = buf(R * MB, np.int32).reshape(R, MB)
        self._table[:] = 0
        self._slots = buf(T, np.int64)
        self._cpl = buf(R, np.int32)
        self._tables = [self._table]  # per group; group 0's is the batch's own
        self._group_slots = [self._slots]
        for _ in range(1, G):
            self._tables.append(buf(R * MB, np.int32).reshape(R, MB))
            self._tables[-1][:] = 0
            self._group_slots.append(buf(T, np.int64))
        self._released = [0] * G
        self._cols = np.arange(MB, dtype=np.int64)
        cp = binding.cp
        self._cp = ((cp.world_size, cp.rank, cp.interleave)
                    if cp is not None and cp.world_size > 1 else None)
        self._iota = np.arange(T, dtype=np.int64)
        self._req_idx = np.arange(R, dtype=np.int64)

        # the metadata device: the first non-CPU device bound, else the CPU
        dev = None
        for l in range(binding.num_layers):
            for p in (0, 1):
                d = binding._device_ptr(l, p)
                if lib.ah_device_kind_of(d) != 0:
                    dev = d
                    break
            if dev:
                break
        self._dev = dev
        self._dev_bufs = []
        # tensors 0-4: query_start_loc, seq_lens, group 0's table and slots,
        # cp_local_seq_lens; then each further group's table and slots
        host = [self._qsl, self._seq, self._table, self._slots, self._cpl]
        i32, i64 = (_ffi.kDLInt, 32), (_ffi.kDLInt, 64)
        dts = [i32, i32, i32, i64, i32]
        shapes = [(R + 1,), (R,), (R, MB), (T,), (R,)]
        for g in range(1, G):
            host += [self._tables[g], self._group_slots[g]]
            dts += [i32, i64]
            shapes += [(R, MB), (T,)]
        # last: cu_seqlens_k of a ragged step (ABI 2.3)
        self._cuk = buf(R + 1, np.int32)
        host.append(self._cuk)
        dts.append(i32)
        shapes.append((R + 1,))
        if dev is None:
            self._tensors = [OwnedTensor(a.ctypes.data, (_ffi.kDLCPU, 0), dt, sh, a)
                             for a, dt, sh in zip(host, dts, shapes)]
            self._dl_device = (_ffi.kDLCPU, 0)
        else:
            dl = lib.ah_device_dl(dev)
            self._dl_device = (int(dl.device_type), int(dl.device_id))
            self._tensors = []
            for a, dt, sh in zip(host, dts, shapes):
                p = ctypes.c_void_p()
                st = lib.ah_device_alloc(dev, a.nbytes, ctypes.byref(p))
                if st:
                    raise error_for(st, _ffi.s(lib.ah_device_errmsg(dev)))
                self._dev_bufs.append(p.value)
                self._tensors.append(OwnedTensor(p.value, self._dl_device, dt, sh, None))
        self._adopt(1, self._free_device, (binding,))

        self._batch = Batch(self)
        c = self._batch.c
        c.query_start_loc, c.seq_lens, c.block_table, c.slot_mapping = (
            t.ptr for t in self._tensors[:4])
        c.query_start_loc_host = self._qsl.ctypes.data
        c.seq_lens_host = self._seq.ctypes.data
        c.block_table_host = self._table.ctypes.data
        c.slot_mapping_host = self._slots.ctypes.data
        c.block_table_stride = MB
        c.num_blocks = self.num_blocks
        # entry 0 has no host table: it stands for the batch's own fields
        self._c_groups = (_ffi.ah_kv_group * G)()
        for g, e in enumerate(self._c_groups):
            e.struct_size = ctypes.sizeof(_ffi.ah_kv_group)
            if g:
                e.num_blocks = self.group_num_blocks[g]
                e.block_table, e.slot_mapping = (t.ptr for t in self._tensors[3 + 2 * g:5 + 2 * g])
                e.block_table_host = self._tables[g].ctypes.data
                e.slot_mapping_host = self._group_slots[g].ctypes.data
                e.block_table_stride = MB
        if G > 1:
            c.num_kv_groups = G
            c.kv_groups = ctypes.addressof(self._c_groups)

    def _free_device(self, _ptr: int) -> None:
        lib = _ffi.load()
        for p in self._dev_bufs:
            lib.ah_device_free(self._dev, p)
        self._dev_bufs = []

    def _stream(self) -> Optional[int]:
        if self._dev is None:
            return None
        torch = sys.modules.get("torch")
        if torch is not None and self._dl_device[0] == _ffi.kDLCUDA:
            return int(torch.cuda.current_stream(self._dl_device[1]).cuda_stream)
        return _ffi.load().ah_device_stream(self._dev)

    def build(self, query_lens: Sequence[int], context_lens: Sequence[int],
              block_ids: Any, common_prefix_len: int = 0,
              cp_local_seq_lens: Union[None, bool, Sequence[int]] = None,
              release_blocks: bool = False,
              key_lens: Optional[Sequence[int]] = None) -> Batch:
        """The batch of requests r = 0..n-1 with query_lens[r] new tokens
        after context_lens[r] cached ones, whose KV lives in the blocks
        block_ids[r] (the request's logical block i is block_ids[r][i]).

        block_ids is a 2-D integer array [n, width] (the fast path: an
        engine's block table) or a sequence of per-request sequences.
        Decode requests (query length 1) first lets the host split the
        batch for free (as vLLM and SGLang order them).

        Under context parallelism block_ids[r] covers the rank's share of
        request r, and cp_local_seq_lens is what the batch tells the
        library of it (ah_batch.cp_local_seq_lens): None, the library
        computes it; True, the builder's own count; a sequence, those
        lengths as given (the library checks them at plan).

        With several KV-cache groups block_ids[g] is group g's block ids
        (either form above, in the group's block size). release_blocks
        marks -1 (released) each block of a group with a window that the
        window hides from all of its request's queries (vLLM's
        SlidingWindowManager frees them); block_ids may carry such
        negative entries too, but never where a new token is stored.

        key_lens makes a ragged step (ABI 2.3): request r's keys and values
        are key_lens[r] rows of the key and value tensors forward takes,
        packed in request order (ah_batch.cu_seqlens_k, num_k_tokens), and
        each layer with a ragged prefill form runs it; the paging above
        still describes the paged cache that write_kv fills. On a causal
        layer key_lens[r] >= query_lens[r] (the queries sit at the last
        key positions). None: an ordinary paged step.

        Returns this builder's :class:`Batch` (the same object every step).
        Raises :class:`InvalidArgumentError` naming the field, request and
        value when the input does not fit the limits or the block lists;
        block ids outside the cache are caught by the binding's plan.
        """
        import numpy as np

        q = np.asarray(query_lens, dtype=np.int64)
        ctx = np.asarray(context_lens, dtype=np.int64)
        n = q.shape[0] if q.ndim == 1 else -1
        if n < 1 or ctx.shape != q.shape:
            raise _bad(f"query_lens has shape {q.shape}, context_lens {ctx.shape}: expected two "
                       f"equal 1-D sequences of at least one request")
        if n > self.max_num_reqs:
            raise _bad(f"num_reqs = {n} exceeds max_num_reqs = {self.max_num_reqs}")
        if q.min() < 1:
            r = int(np.argmin(q))
            raise _bad(f"query_lens[{r}] = {int(q[r])}: must be >= 1")
        if ctx.min() < 0:
            r = int(np.argmin(ctx))
            raise _bad(f"context_lens[{r}] = {int(ctx[r])}: must be >= 0")
        seq = ctx + q
        given = self._check_cp_lens(cp_local_seq_lens, n)
        qsl = self._qsl
        qsl[0] = 0
        np.cumsum(q, out=qsl[1: n + 1], dtype=np.int32)
        T = int(qsl[n])
        if T > self.max_num_tokens:
            raise _bad(f"num_tokens = {T} exceeds max_num_tokens = {self.max_num_tokens}")
        max_seq = int(seq.max())
        if max_seq > self.max_seq_len:
            r = int(np.argmax(seq))
            raise _bad(f"seq_lens[{r}] = {max_seq} exceeds max_seq_len = {self.max_seq_len}")
        held = seq if self._cp is None else _local_lens(seq, *self._cp)
        G = len(self.block_sizes)
        if G == 1:
            per_group = (block_ids,)
        else:
            per_group = tuple(block_ids)  # a 3-D array is a table per group too
            if len(per_group) != G:
                raise _bad(f"block_ids has {len(per_group)} entries, but the model has {G} "
                           f"KV-cache groups: give one block-id table (or per-request lists) "
                           f"per group")
        if release_blocks and self._cp is not None:
            raise _bad("release_blocks under context parallelism: the window's blocks are not "
                       "the rank's; mark released entries in block_ids instead")
        # slot of token t of request r: position p = ctx[r] + (t - qsl[r])
        r_of_t = np.repeat(self._req_idx[:n], q)
        pos = self._iota[:T] - (qsl[:n].astype(np.int64) - ctx)[r_of_t]
        for g in range(G):
            self._page(g, per_group[g], n, T, seq, seq - q, held, r_of_t, pos,
                       release_blocks and self.release_windows[g] > 0)
        self._seq[:n] = seq
        if given is True:
            self._cpl[:n] = held

        b = self._batch
        c = b.c
        n_keys = self._ragged_keys(key_lens, n, c)
        if n_keys:
            max_seq = max(max_seq, int(np.asarray(key_lens).max()))
        b._cp_given = given is not None
        c.cp_local_seq_lens = self._tensors[4].ptr if b._cp_given else None
        c.cp_local_seq_lens_host = self._cpl.ctypes.data if b._cp_given else None
        b.num_reqs, b.num_tokens = n, T
        b.max_query_len, b.max_seq_len = int(q.max()), max_seq
        c.num_reqs, c.num_tokens = n, T
        c.max_query_len, c.max_seq_len = b.max_query_len, max_seq
        c.common_prefix_len = common_prefix_len
        t = self._tensors
        t[0].shape[0] = n + 1
        t[1].shape[0] = n
        t[2].shape[0] = n
        t[3].shape[0] = T
        t[4].shape[0] = n
        for g in range(1, len(self.block_sizes)):
            t[3 + 2 * g].shape[0] = n
            t[4 + 2 * g].shape[0] = T
        t[-1].shape[0] = n + 1
        if self._dev is not None:
            self._upload(n, T, b._cp_given, n_keys > 0)
        return b

    def _ragged_keys(self, key_lens: Optional[Sequence[int]], n: int, c: Any) -> int:
        """cu_seqlens_k from key_lens into the batch (cleared for None);
        the number of key rows (0 for None)."""
        import numpy as np

        if key_lens is None:
            c.cu_seqlens_k = c.cu_seqlens_k_host = None
            c.num_k_tokens = 0
            return 0
        k = np.asarray(key_lens, dtype=np.int64)
        if k.shape != (n,):
            raise _bad(f"key_lens has shape {k.shape}: expected one key count per request ({n})")
        if k.min() < 1:
            r = int(np.argmin(k))
            raise _bad(f"key_lens[{r}] = {int(k[r])}: a request needs at least one key")
        if k.max() > self.max_seq_len:
            r = int(np.argmax(k))
            raise _bad(f"key_lens[{r}] = {int(k[r])} exceeds max_seq_len = {self.max_seq_len}")
        self._cuk[0] = 0
        np.cumsum(k, out=self._cuk[1: n + 1], dtype=np.int32)
        c.cu_seqlens_k = self._tensors[-1].ptr
        c.cu_seqlens_k_host = self._cuk.ctypes.data
        c.num_k_tokens = int(self._cuk[n])
        return c.num_k_tokens

    def _page(self, g: int, block_ids: Any, n: int, T: int, seq: Any, first_pos: Any,
              held: Any, r_of_t: Any, pos: Any, release: bool) -> None:
        """Group g's block table and slot mapping: block_ids copied into the
        group's table (entries a window hides marked -1 when release), and
        each new token's slot in the group's blocks."""
        import numpy as np

        bs = self.block_sizes[g]
        one = len(self.block_sizes) == 1
        field = "block_ids" if one else f"block_ids[{g}]"
        pre = "" if one else f"kv group {g}: "

        def covers(r: int) -> str:
            s = f"seq_lens[{r}] = {int(seq[r])}"
            return s if self._cp is None else f"{s} ({int(held[r])} on cp rank {self._cp[1]})"

        need = (held + bs - 1) // bs
        MB = self.max_blocks_per_req
        table = self._tables[g]

        if isinstance(block_ids, np.ndarray) and block_ids.ndim == 2:
            w = block_ids.shape[1]
            if block_ids.shape[0] != n:
                raise _bad(f"{pre}{field} has {block_ids.shape[0]} rows for {n} requests")
            if w > MB:
                raise _bad(f"{pre}{field} has {w} columns: more than max_blocks_per_req = {MB}")
            if int(need.max()) > w:
                r = int(np.argmax(need))
                raise _bad(f"{pre}{field}[{r}]: {w} blocks for {covers(r)}, "
                           f"which needs {int(need[r])} blocks of {bs}")
            table[:n, :w] = block_ids
        else:
            if len(block_ids) != n:
                raise _bad(f"{pre}{field} has {len(block_ids)} entries for {n} requests")
            lens = np.fromiter(map(len, block_ids), dtype=np.int64, count=n)
            short = np.nonzero(lens < need)[0]
            if short.size:
                r = int(short[0])
                raise _bad(f"{pre}{field}[{r}]: {int(lens[r])} blocks for {covers(r)}, "
                           f"which needs {int(need[r])} blocks of {bs}")
            if lens.max() > MB:
                r = int(np.argmax(lens))
                raise _bad(f"{pre}{field}[{r}] has {int(lens[r])} blocks: more than "
                           f"max_blocks_per_req = {MB}")
            total = int(lens.sum())
            flat = np.fromiter(itertools.chain.from_iterable(block_ids), dtype=np.int64,
                               count=total)
            rows = np.repeat(self._req_idx[:n], lens)
            starts = np.cumsum(lens) - lens
            cols = self._iota_any(total) - np.repeat(starts, lens)
            table[rows, cols] = flat

        self._released[g] = 0
        if release:  # blocks wholly before each request's first query minus the window
            hidden = np.maximum((first_pos - self.release_windows[g] + 1) // bs, 0)
            mask = self._cols[None, :] < hidden[:, None]
            table[:n][mask] = -1
            self._released[g] = int(hidden.sum())

        slots = self._group_slots[g]
        if self._cp is None:
            blk = table[r_of_t, pos // bs]
            mine = None
            local = pos
        else:  # the rank's slot of the tokens it holds, -1 for the others'
            world, rank, interleave = self._cp
            owner, local = _locate(pos, world, interleave)
            mine = owner == rank
            local = np.where(mine, local, 0)
            blk = table[r_of_t, local // bs]
        dead = blk < 0 if mine is None else (blk < 0) & mine
        if dead.any():
            t = int(np.argmax(dead))
            r, k = int(r_of_t[t]), int(local[t]) // bs
            raise _bad(f"{pre}{field}[{r}][{k}] = {int(blk[t])}: a released block, but request "
                       f"{r}'s new token at position {int(pos[t])} is stored in it")
        if mine is None:
            np.add(blk.astype(np.int64) * bs, pos % bs, out=slots[:T])
        else:
            blk = blk.astype(np.int64)
            np.copyto(slots[:T], np.where(mine, blk * bs + local % bs, -1))

    def _check_cp_lens(self, lens: Union[None, bool, Sequence[int]], n: int) -> Any:
        """None, True, or the given local lengths, copied into the
        builder's buffer; raises on a binding without context parallelism
        and on a length that is no int32 per request."""
        import numpy as np

        if lens is None or lens is False:
            return None
        if self._cp is None:
            raise _bad("cp_local_seq_lens given, but the binding has no context parallelism "
                       "(Binding(..., cp=...))")
        if lens is True:
            return True
        a = np.asarray(lens, dtype=np.int64)
        if a.shape != (n,):
            raise _bad(f"cp_local_seq_lens has shape {a.shape}: expected ({n},), one per "
                       f"request")
        bad = np.nonzero((a < 0) | (a > np.iinfo(np.int32).max))[0]
        if bad.size:
            r = int(bad[0])
            raise _bad(f"cp_local_seq_lens[{r}] = {int(a[r])}: not an int32 length")
        self._cpl[:n] = a
        return a

    def _iota_any(self, n: int):
        import numpy as np

        return self._iota[:n] if n <= self._iota.shape[0] else np.arange(n, dtype=np.int64)

    def _upload(self, n: int, T: int, cp_lens: bool, ragged: bool) -> None:
        lib = _ffi.load()
        for host, dev, nbytes in ((self._cuk, self._dev_bufs[-1], (n + 1) * 4 if ragged else 0),
                                  (self._qsl, self._dev_bufs[0], (n + 1) * 4),
                                  (self._seq, self._dev_bufs[1], n * 4),
                                  (self._table, self._dev_bufs[2], n * self.max_blocks_per_req * 4),
                                  (self._slots, self._dev_bufs[3], T * 8),
                                  (self._cpl, self._dev_bufs[4], n * 4 if cp_lens else 0),
                                  *self._group_copies(n, T)):
            if not nbytes:
                continue
            st = lib.ah_device_copy(self._dev, dev, host.ctypes.data, nbytes, 0)
            if st:
                raise error_for(st, _ffi.s(lib.ah_device_errmsg(self._dev)))

    def _group_copies(self, n: int, T: int) -> List[Tuple[Any, int, int]]:
        """(host, device, nbytes) of each further group's table and slots."""
        MB, out = self.max_blocks_per_req, []
        for g in range(1, len(self.block_sizes)):
            out += [(self._tables[g], self._dev_bufs[3 + 2 * g], n * MB * 4),
                    (self._group_slots[g], self._dev_bufs[4 + 2 * g], T * 8)]
        return out

    def __repr__(self) -> str:
        return (f"attnhost.BatchBuilder(max_num_reqs={self.max_num_reqs}, "
                f"max_num_tokens={self.max_num_tokens}, block_size="
                f"{self.block_size if len(self.block_sizes) == 1 else self.block_sizes})")
