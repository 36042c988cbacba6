"""attnhost from Python: a pure-Python (ctypes) binding of libattnhost.

    import attnhost
    host = attnhost.Host()
    model = attnhost.Model.from_ini("llama-3-8b.ini")
    sel = host.select(model)
    b = attnhost.Binding(host, sel, max_num_reqs=256, max_num_tokens=8192,
                         max_blocks_per_req=1024, max_seq_len=16384, num_blocks=65536)
    cache = attnhost.PagedKVCache(b)
    builder = attnhost.BatchBuilder(b)
    batch = builder.build(query_lens, context_lens, block_ids)
    b.plan(batch)
    for l in range(model.num_layers):
        b.forward(l, q[l], k[l], v[l], *cache.tensors(l), out[l])

The library is found through $ATTNHOST_LIB, beside this package, or on the
dynamic linker's path; its plugins are found beside the library. See
docs/python.md.
"""

from __future__ import annotations

from ._dlpack import Tensor
from ._ffi import ABI_MAJOR, ABI_MINOR, library_path
from .batch import Batch, BatchBuilder
from .binding import Binding, DeviceInfo, KVCacheDesc, KVGroup, Split
from .cp import (
    CpGroup,
    LocalCpGroup,
    NcclComm,
    NcclComms,
    cp_local_index,
    cp_local_len,
    cp_rank_of,
    default_nccl_library,
)
from .errors import (
    AbiMismatchError,
    AttnhostError,
    ConfigError,
    DeviceError,
    InternalError,
    InvalidArgumentError,
    IOError_,
    LibraryNotFoundError,
    NotFoundError,
    OutOfMemoryError,
    PluginError,
    Status,
    UnavailableError,
    UnsupportedError,
)
from .host import Host, PluginInfo, ProbeInfo, abi_version, version
from .kvcache import PagedKVCache
from .model import LayerSpec, Model
from .selection import Candidate, Decision, Reason, Selection

__version__ = "0.2.0"

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "AbiMismatchError", "AttnhostError", "Batch", "BatchBuilder",
    "Binding", "Candidate", "ConfigError", "CpGroup", "Decision", "DeviceError", "DeviceInfo",
    "Host", "IOError_", "InternalError", "InvalidArgumentError", "KVCacheDesc", "KVGroup", "LayerSpec",
    "LibraryNotFoundError", "LocalCpGroup", "Model", "NcclComm", "NcclComms", "NotFoundError",
    "OutOfMemoryError", "PagedKVCache", "PluginError", "PluginInfo", "ProbeInfo", "Reason",
    "Selection", "Split", "Status", "Tensor", "UnavailableError", "UnsupportedError",
    "abi_version", "cp_local_index", "cp_local_len", "cp_rank_of", "default_nccl_library",
    "library_path", "version",
]
