"""ctypes declarations of libattnhost's public API (attnhost.h, plugin.h,
reference.h) and the loader that finds the library.

Every structure here mirrors its C declaration field for field; the test
``test_layout.py`` compares sizes and offsets with a C program built from
the headers, so a change to the ABI shows up as a failing test.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Optional

from .errors import AbiMismatchError, LibraryNotFoundError, Status, UnsupportedError

#: The ABI major this package was written for (AH_ABI_VERSION_MAJOR).
ABI_MAJOR = 2
#: The ABI minor it knows the structures of; a newer minor only appends.
#: (2.4 added device events to the plugin operations, which Python never sees.)
ABI_MINOR = 4

c_enum = c_int

# --------------------------------------------------------------------------
# DLPack 0.6 (dlpack/dlpack.h)
# --------------------------------------------------------------------------

kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLROCM = 10

kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4


class DLDevice(Structure):
    _fields_ = [("device_type", c_enum), ("device_id", c_int)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))),
]

# --------------------------------------------------------------------------
# plugin.h
# --------------------------------------------------------------------------


class ah_int_set(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("n_values", c_uint32),
        ("values", POINTER(c_uint32)),
        ("range_min", c_uint32),
        ("range_max", c_uint32),
        ("range_step", c_uint32),
    ]


class ah_hw_facts(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("cpu_isa", c_uint32),
        ("cpu_isa_cpuid", c_uint32),
        ("cpu_logical_cores", c_uint32),
        ("memory_bytes", c_uint64),
        ("cpu_vendor", c_char * 16),
        ("cpu_model", c_char * 64),
        ("amx_note", c_char * 96),
    ]


class ah_probe_info(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("usable", c_int32),
        ("reason", c_char * 256),
        ("device_name", c_char * 128),
        ("arch", c_char * 32),
        ("compute_capability", c_uint32),
        ("device_count", c_uint32),
        ("multiprocessors", c_uint32),
        ("memory_bytes", c_uint64),
        ("driver_version", c_char * 64),
    ]


class ah_layer_spec(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("attn_type", c_enum),
        ("num_q_heads", c_uint32),
        ("num_kv_heads", c_uint32),
        ("qk_head_size", c_uint32),
        ("v_head_size", c_uint32),
        ("q_dtype", c_enum),
        ("kv_dtype", c_enum),
        ("block_size", c_uint32),
        ("kv_layout", c_enum),
        ("sliding_window", c_uint32),
        ("softcap", c_float),
        ("scale", c_float),
        ("use_mla", c_uint32),
        ("use_sinks", c_uint32),
        ("use_alibi", c_uint32),
        ("fp8_attention", c_uint32),
        ("causal", c_uint32),  # ABI 2.1
        ("kv_group", c_uint32),  # ABI 2.1
        # ABI 2.3: ragged K/V
        ("ragged_kv", c_uint32),
        ("kv_scales", c_uint32),  # ABI 2.3: ah_kv_scales
        ("use_q_scale", c_uint32),  # ABI 2.3
    ]


class ah_config_key(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("type", c_enum),
        ("default_value", c_char_p),
        ("int_min", c_int64),
        ("int_max", c_int64),
        ("float_min", c_double),
        ("float_max", c_double),
        ("choices", c_char_p),
        ("doc", c_char_p),
    ]


class ah_caps(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("q_dtypes", c_uint32),
        ("kv_dtypes", c_uint32),
        ("qk_head_sizes", ah_int_set),
        ("v_head_sizes", ah_int_set),
        ("block_sizes", ah_int_set),
        ("preferred_block_size", c_uint32),
        ("features", c_uint32),
        ("attn_types", c_uint32),
        ("kv_layouts", c_uint32),
        ("preferred_kv_layout", c_enum),
        ("min_compute_capability", c_uint32),
        ("max_compute_capability", c_uint32),
        ("gfx_targets", POINTER(c_char_p)),
        ("n_gfx_targets", c_uint32),
        ("cpu_isa_required", c_uint32),
        ("graph_level", c_enum),
        ("graph_seq_len_fill", c_int32),
        ("forward_writes_kv", c_uint32),
        ("caller_output", c_uint32),
        ("max_head_groups", c_uint32),
        ("config_keys", POINTER(ah_config_key)),
        ("n_config_keys", c_uint32),
        ("check_combination", c_void_p),
        ("prefill_rank", c_uint32),
        ("decode_rank", c_uint32),
        ("mixed_batch", c_enum),
        ("decode_query_len_max", c_uint32),
    ]


class ah_batch(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("num_reqs", c_uint32),
        ("num_tokens", c_uint32),
        ("max_query_len", c_uint32),
        ("max_seq_len", c_uint32),
        ("num_blocks", c_uint32),
        ("query_start_loc", c_void_p),  # const DLTensor *
        ("seq_lens", c_void_p),
        ("block_table", c_void_p),
        ("slot_mapping", c_void_p),
        ("query_start_loc_host", c_void_p),  # const int32_t *
        ("seq_lens_host", c_void_p),
        ("block_table_host", c_void_p),
        ("slot_mapping_host", c_void_p),  # const int64_t *
        ("block_table_stride", c_uint32),
        ("common_prefix_len", c_uint32),
        # ABI 2.1
        ("encoder_seq_lens", c_void_p),
        ("encoder_seq_lens_host", c_void_p),
        ("custom_mask", c_void_p),
        ("mask_indptr", c_void_p),
        ("custom_mask_host", c_void_p),
        ("mask_indptr_host", c_void_p),
        ("custom_mask_len", c_uint64),
        ("num_kv_groups", c_uint32),  # ABI 2.1
        ("kv_groups", c_void_p),  # const ah_kv_group *
        ("cp_local_seq_lens", c_void_p),  # ABI 2.2: const DLTensor *
        ("cp_local_seq_lens_host", c_void_p),  # const int32_t *
        # ABI 2.3: ragged K/V
        ("cu_seqlens_k", c_void_p),  # const DLTensor *
        ("cu_seqlens_k_host", c_void_p),  # const int32_t *
        ("num_k_tokens", c_uint32),
        ("ragged_keys", c_uint32),  # ah_ragged_keys
    ]


class ah_kv_group(Structure):  # ABI 2.1
    _fields_ = [
        ("struct_size", c_uint32),
        ("num_blocks", c_uint32),
        ("block_table", c_void_p),  # const DLTensor *
        ("slot_mapping", c_void_p),
        ("block_table_host", c_void_p),  # const int32_t *
        ("slot_mapping_host", c_void_p),  # const int64_t *
        ("block_table_stride", c_uint32),
    ]


class ah_limits(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("max_num_reqs", c_uint32),
        ("max_num_tokens", c_uint32),
        ("max_blocks_per_req", c_uint32),
        ("max_seq_len", c_uint32),
        ("num_blocks", c_uint32),
    ]


class ah_forward_args(Structure):
    # Tensor pointers are c_void_p so that assigning an address (an int
    # from PyCapsule_GetPointer) costs no conversion.
    _fields_ = [
        ("struct_size", c_uint32),
        ("q", c_void_p),
        ("key", c_void_p),
        ("value", c_void_p),
        ("key_cache", c_void_p),
        ("value_cache", c_void_p),
        ("out", c_void_p),
        ("lse", c_void_p),
        ("sinks", c_void_p),
        ("alibi_slopes", c_void_p),
        ("k_scale", c_float),
        ("v_scale", c_float),
        ("stream", c_void_p),
        ("k_scale_tensor", c_void_p),  # ABI 2.3: FP8 scales
        ("v_scale_tensor", c_void_p),
        ("q_scale", c_float),
        ("q_scale_tensor", c_void_p),
    ]


# --------------------------------------------------------------------------
# attnhost.h
# --------------------------------------------------------------------------


class ah_error(Structure):
    _fields_ = [("msg", c_char * 1024)]


class ah_host_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("config_path", c_char_p),
        ("config_text", c_char_p),
        ("plugin_dirs", POINTER(c_char_p)),
        ("n_plugin_dirs", c_uint32),
        ("no_default_dirs", c_int),
        ("scan_mode", c_enum),
        ("cache_path", c_char_p),
        ("ignore_require_checked", c_int),
    ]


class ah_plugin_info(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("name", c_char_p),
        ("path", c_char_p),
        ("version", c_char_p),
        ("vendor", c_char_p),
        ("license", c_char_p),
        ("description", c_char_p),
        ("device_kind", c_enum),
        ("state", c_enum),
        ("reason", c_char_p),
        ("caps", POINTER(ah_caps)),
        ("probe", POINTER(ah_probe_info)),
        ("has_check_combination", c_int),
        ("from_cache", c_int),
        ("scan_ms", c_double),
    ]


class ah_reason(Structure):
    _fields_ = [
        ("code", c_enum),
        ("field", c_char_p),
        ("value", c_char_p),
        ("supported", c_char_p),
    ]


class ah_candidate(Structure):
    _fields_ = [
        ("plugin", c_char_p),
        ("n_reasons", c_uint32),
        ("reasons", POINTER(ah_reason)),
        ("chosen", c_int),
    ]


class ah_model_desc(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("name", c_char_p),
        ("num_layers", c_uint32),
        ("layers", POINTER(ah_layer_spec)),
        ("kinds", POINTER(c_enum)),
        ("ragged_forms", POINTER(ah_layer_spec)),  # ABI 2.3: ragged K/V
    ]


class ah_hf_import_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("dtype", c_enum),
        ("kv_dtype", c_enum),
        ("block_size", c_uint32),
        ("tensor_parallel", c_uint32),
        ("name", c_char_p),
        ("chunked_virtual_batches", c_int),
        ("reserved", c_uint32),  # never read: the old tail padding
        ("kv_groups", c_uint32),  # ah_hf_kv_groups
    ]


class ah_decision(Structure):
    _fields_ = [
        ("plugin", c_char_p),
        ("list_source", c_char_p),
        ("n_candidates", c_uint32),
        ("candidates", POINTER(ah_candidate)),
        ("spec", ah_layer_spec),
        ("fallback", c_int),
        ("kernel_block_size", c_uint32),  # ABI 2.3 (KV-cache layout)
    ]


class ah_cp_options(Structure):  # ABI 2.2
    _fields_ = [
        ("struct_size", c_uint32),
        ("world_size", c_uint32),
        ("rank", c_uint32),
        ("interleave", c_uint32),
        ("nccl_comm", c_void_p),
        ("local_group", c_void_p),  # ah_cp_local_group *
        ("nccl_library", c_char_p),
        ("timeout_ms", c_uint32),
    ]


class ah_binding_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("limits", ah_limits),
        ("no_validation", c_int),
        ("device_index", c_int32),
        ("cp", POINTER(ah_cp_options)),  # ABI 2.2
        ("mixed_steps", c_int),  # ah_mixed_steps; 0: [select] mixed_steps
    ]


class ah_kv_cache_desc(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("ndim", c_int32),
        ("shape", c_int64 * 6),
        ("strides", c_int64 * 6),
        ("kv_dtype", c_enum),
        ("dl_dtype", DLDataType),
        # ABI 2.3 (KV-cache layout)
        ("alloc_ndim", c_int32),
        ("alloc_shape", c_int64 * 6),
        ("offset", c_int64),
        ("in_key_alloc", c_uint32),
    ]


# --------------------------------------------------------------------------
# reference.h (exported: every ah_* symbol leaves the library)
# --------------------------------------------------------------------------


class ah_ref_inputs(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("spec", POINTER(ah_layer_spec)),
        ("batch", POINTER(ah_batch)),
        ("q", c_void_p),
        ("key_cache", c_void_p),
        ("value_cache", c_void_p),
        ("sinks", c_void_p),
        ("alibi_slopes", c_void_p),
        ("k_scale", c_float),
        ("v_scale", c_float),
        ("key", c_void_p),  # cacheless layers (since 2.1)
        ("value", c_void_p),
        ("k_scales", POINTER(c_float)),  # per-KV-head scales (since 2.3)
        ("v_scales", POINTER(c_float)),
    ]


#: Every structure the package mirrors, by its C name (for the layout test).
STRUCTS = {
    cls.__name__: cls
    for cls in (
        DLDevice, DLDataType, DLTensor, DLManagedTensor, ah_int_set, ah_hw_facts,
        ah_probe_info, ah_layer_spec, ah_config_key, ah_caps, ah_batch, ah_kv_group, ah_limits,
        ah_model_desc, ah_hf_import_options,
        ah_forward_args, ah_error, ah_host_options, ah_plugin_info, ah_reason,
        ah_candidate, ah_decision, ah_cp_options, ah_binding_options, ah_kv_cache_desc,
        ah_ref_inputs,
    )
}

# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_P = c_void_p  # opaque handles


def _candidates() -> list:
    """Where to look for libattnhost, in order."""
    out = []
    env = os.environ.get("ATTNHOST_LIB")
    if env:
        out.append(("ATTNHOST_LIB", env))
        return out  # an explicit choice: no silent fallback
    here = Path(__file__).resolve().parent
    for name in ("libattnhost.so", f"libattnhost.so.{ABI_MAJOR}"):
        for d in (here, here / "lib"):
            if (d / name).exists():
                out.append(("beside the package", str(d / name)))
    found = ctypes.util.find_library("attnhost")
    for name in ([found] if found else []) + [f"libattnhost.so.{ABI_MAJOR}", "libattnhost.so"]:
        out.append(("the library path", name))
    return out


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    cp = c_char_p
    fn("ah_status_str", cp, c_enum)
    fn("ah_host_create", c_enum, POINTER(ah_host_options), POINTER(_P), POINTER(ah_error))
    fn("ah_host_destroy", None, _P)
    fn("ah_host_errmsg", cp, _P)
    fn("ah_host_hw_facts", POINTER(ah_hw_facts), _P)
    fn("ah_plugin_state_str", cp, c_enum)
    fn("ah_host_plugin_count", c_size_t, _P)
    fn("ah_host_plugin", POINTER(ah_plugin_info), _P, c_size_t)
    fn("ah_host_find_plugin", POINTER(ah_plugin_info), _P, cp)
    fn("ah_host_config_dump", c_enum, _P, c_int, POINTER(c_void_p))
    fn("ah_host_config_warnings", cp, _P)
    fn("ah_model_load", c_enum, cp, POINTER(_P), POINTER(ah_error))
    fn("ah_model_parse", c_enum, cp, cp, POINTER(_P), POINTER(ah_error))
    fn("ah_model_destroy", None, _P)
    fn("ah_model_name", cp, _P)
    fn("ah_model_num_layers", c_uint32, _P)
    fn("ah_model_num_kv_groups", c_uint32, _P)
    fn("ah_model_layer", POINTER(ah_layer_spec), _P, c_uint32)
    fn("ah_demo_model_text", cp)
    fn("ah_model_create", c_enum, POINTER(ah_model_desc), POINTER(_P), POINTER(ah_error))
    fn("ah_model_to_ini", c_enum, _P, POINTER(c_void_p))
    fn("ah_model_layer_kind", c_enum, _P, c_uint32)
    fn("ah_selection_layer_kind", c_enum, _P, c_uint32)
    fn("ah_layer_kind_str", cp, c_enum)
    fn("ah_model_import_available", c_int)
    fn("ah_model_import_hf_opts", c_enum, cp, cp, POINTER(ah_hf_import_options), POINTER(_P),
       POINTER(ah_error))
    fn("ah_host_select", c_enum, _P, _P, POINTER(_P), POINTER(ah_error))
    fn("ah_host_select_forced", c_enum, _P, _P, cp, POINTER(_P), POINTER(ah_error))
    fn("ah_selection_destroy", None, _P)
    fn("ah_selection_num_layers", c_uint32, _P)
    fn("ah_selection_decision", POINTER(ah_decision), _P, c_uint32, c_enum)
    fn("ah_selection_graph_level", c_enum, _P, POINTER(c_uint32))
    fn("ah_selection_warnings", cp, _P)
    fn("ah_selection_mixed_steps", c_enum, _P, _P, POINTER(c_uint32), POINTER(c_double),
       POINTER(c_double))
    for name in ("ah_reason_code_str", "ah_graph_level_str", "ah_attn_type_str",
                 "ah_kv_layout_str", "ah_device_kind_str"):
        fn(name, cp, c_enum)
    fn("ah_feature_name", cp, c_uint32)
    fn("ah_format_int_set", None, POINTER(ah_int_set), ctypes.c_char_p, c_size_t)
    for name in ("ah_format_dtype_mask", "ah_format_attn_types", "ah_format_layouts",
                 "ah_format_features", "ah_format_isa"):
        fn(name, None, c_uint32, ctypes.c_char_p, c_size_t)
    fn("ah_binding_create", c_enum, _P, _P, POINTER(ah_binding_options), POINTER(_P),
       POINTER(ah_error))
    fn("ah_binding_destroy", None, _P)
    fn("ah_binding_errmsg", cp, _P)
    fn("ah_binding_plan", c_enum, _P, _P, c_enum, c_void_p)
    fn("ah_binding_phase", c_enum, _P)
    fn("ah_binding_split", c_uint32, _P, POINTER(c_uint32), POINTER(c_char_p))
    fn("ah_binding_forward", c_enum, _P, c_uint32, _P)
    fn("ah_binding_kv_cache_desc", c_enum, _P, c_uint32, c_uint32, POINTER(ah_kv_cache_desc),
       POINTER(ah_kv_cache_desc))
    fn("ah_binding_device", _P, _P, c_uint32, c_enum)
    fn("ah_binding_block_size", c_uint32, _P, c_uint32, c_enum, POINTER(c_uint32))
    fn("ah_selection_kv_group_block_size", c_uint32, _P, c_uint32, POINTER(c_char_p))
    fn("ah_device_kind_of", c_enum, _P)
    fn("ah_device_dl", DLDevice, _P)
    fn("ah_device_errmsg", cp, _P)
    fn("ah_device_alloc", c_enum, _P, c_size_t, POINTER(c_void_p))
    fn("ah_device_free", None, _P, c_void_p)
    fn("ah_device_copy", c_enum, _P, c_void_p, c_void_p, c_size_t, c_enum)
    fn("ah_device_sync", c_enum, _P)
    fn("ah_device_stream", c_void_p, _P)
    fn("ah_batch_validate", c_enum, _P, POINTER(ah_layer_spec), POINTER(ah_limits),
       POINTER(ah_error))
    fn("ah_reference_attention", c_enum, POINTER(ah_ref_inputs), c_void_p, c_void_p,
       POINTER(ah_error))
    fn("ah_reference_write_kv", c_enum, POINTER(ah_layer_spec), _P, c_void_p, c_void_p,
       c_void_p, c_void_p, c_float, c_float, POINTER(ah_error))
    if hasattr(lib, "ah_reference_write_kv_per_head"):  # ABI 2.3
        fn("ah_reference_write_kv_per_head", c_enum, POINTER(ah_layer_spec), _P, c_void_p,
           c_void_p, c_void_p, c_void_p, POINTER(c_float), POINTER(c_float), POINTER(ah_error))
    # ABI 2.2 (context parallelism): declared where the library has them;
    # require() refuses their use on an older library.
    if hasattr(lib, "ah_cp_local_len"):
        fn("ah_cp_local_group_create", c_enum, c_uint32, POINTER(_P), POINTER(ah_error))
        fn("ah_cp_local_group_destroy", None, _P)
        fn("ah_cp_rank_of", c_uint32, c_uint64, c_uint32, c_uint32, POINTER(c_uint64))
        fn("ah_cp_local_len", c_uint64, c_uint64, c_uint32, c_uint32, c_uint32)
        fn("ah_cp_nccl_comms_create", c_enum, c_uint32, POINTER(c_int32), c_char_p,
           POINTER(c_void_p), POINTER(ah_error))
        fn("ah_cp_nccl_comm_destroy", None, c_void_p)


_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def load() -> ctypes.CDLL:
    """Load libattnhost once: ``$ATTNHOST_LIB``, else a copy beside the
    package, else the dynamic linker's search path. Raises
    :class:`LibraryNotFoundError` when none loads and
    :class:`AbiMismatchError` when the library speaks another ABI major."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    lib = None
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            _lib_path = path
            break
        except OSError as e:
            tried.append(f"{path} ({where}): {e}")
    if lib is None:
        raise LibraryNotFoundError(
            "libattnhost not found; tried " + "; ".join(tried)
            + ". Set ATTNHOST_LIB to the library's path (build/lib/libattnhost.so in a "
            "build tree) or install it where the dynamic linker looks.")
    try:
        lib.ah_abi_version.restype = c_uint32
        lib.ah_abi_version.argtypes = []
        lib.ah_version.restype = c_char_p
        lib.ah_version.argtypes = []
        abi = int(lib.ah_abi_version())
    except AttributeError as e:
        raise AbiMismatchError(f"{_lib_path} is not libattnhost ({e})") from None
    if abi >> 16 != ABI_MAJOR:
        raise AbiMismatchError(
            f"{_lib_path} speaks attnhost ABI {abi >> 16}.{abi & 0xFFFF}; this attnhost "
            f"package was written for ABI {ABI_MAJOR}.x: install the matching package or "
            f"library")
    _declare(lib)
    _lib = lib
    return lib


def require(minor: int, symbol: str, what: str) -> ctypes.CDLL:
    """The library, when it speaks ABI 2.minor or newer and exports symbol;
    else :class:`UnsupportedError` naming what needs it and what the library
    speaks. A feature of a newer minor must not reach an older library:
    it would ignore the fields it does not know."""
    lib = load()
    abi = int(lib.ah_abi_version())
    if (abi & 0xFFFF) < minor or not hasattr(lib, symbol):
        have = f"ABI {abi >> 16}.{abi & 0xFFFF}"
        if (abi & 0xFFFF) >= minor:
            have += f" but does not export {symbol}"
        raise UnsupportedError(
            Status.UNSUPPORTED, f"{what} needs libattnhost ABI {ABI_MAJOR}.{minor}; "
            f"{_lib_path} speaks {have}")
    return lib


def library_path() -> str:
    """The path (or name) libattnhost was loaded from."""
    load()
    assert _lib_path is not None
    return _lib_path


def s(b: Optional[bytes]) -> str:
    """C string to str ('' for NULL)."""
    return b.decode("utf-8", "replace") if b else ""
