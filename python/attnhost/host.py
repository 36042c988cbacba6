"""The host: plugin discovery, configuration and selection."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

from . import _ffi
from ._handle import Handle
from .errors import error_for
from .model import Model

_SCAN = {"default": 0, "child": 1, "in_process": 2}
PLUGIN_STATES = ("available", "unavailable", "rejected", "quarantined")
DEVICE_KINDS = ("cpu", "cuda", "hip", "level_zero")


def version() -> str:
    """The loaded library's version ("0.2.0")."""
    return _ffi.s(_ffi.load().ah_version())


def abi_version() -> tuple:
    """The loaded library's plugin ABI as (major, minor)."""
    v = int(_ffi.load().ah_abi_version())
    return (v >> 16, v & 0xFFFF)


@dataclass(frozen=True)
class ProbeInfo:
    """What a plugin's probe found (ah_probe_info)."""

    usable: bool
    reason: str
    device_name: str
    arch: str
    compute_capability: int
    device_count: int
    multiprocessors: int
    memory_bytes: int
    driver_version: str


@dataclass(frozen=True)
class PluginInfo:
    """One plugin file as the host knows it (ah_plugin_info).

    ``caps`` is the capability set as text (the form ``attnhost list``
    prints), empty for rejected and quarantined plugins.
    """

    name: str
    state: str
    reason: str
    device_kind: str
    version: str
    vendor: str
    license: str
    description: str
    path: str
    probe: Optional[ProbeInfo]
    caps: Dict[str, str] = field(default_factory=dict)
    from_cache: bool = False
    scan_ms: float = 0.0

    @property
    def available(self) -> bool:
        return self.state == "available"


def _fmt(fn, *args) -> str:
    buf = ctypes.create_string_buffer(512)
    fn(*args, buf, len(buf))
    return _ffi.s(buf.value)


def _caps_text(lib, c: _ffi.ah_caps) -> Dict[str, str]:
    return {
        "q_dtypes": _fmt(lib.ah_format_dtype_mask, c.q_dtypes),
        "kv_dtypes": _fmt(lib.ah_format_dtype_mask, c.kv_dtypes),
        "qk_head_sizes": _fmt(lib.ah_format_int_set, ctypes.byref(c.qk_head_sizes)),
        "v_head_sizes": _fmt(lib.ah_format_int_set, ctypes.byref(c.v_head_sizes)),
        "block_sizes": _fmt(lib.ah_format_int_set, ctypes.byref(c.block_sizes)),
        "features": _fmt(lib.ah_format_features, c.features),
        "attn_types": _fmt(lib.ah_format_attn_types, c.attn_types),
        "kv_layouts": _fmt(lib.ah_format_layouts, c.kv_layouts),
        "cpu_isa_required": _fmt(lib.ah_format_isa, c.cpu_isa_required),
        "graph_level": _ffi.s(lib.ah_graph_level_str(c.graph_level)),
        "mixed_batch": "split" if c.mixed_batch else "whole",
        "decode_query_len_max": str(c.decode_query_len_max or 1),
    }


def _plugin_info(lib, p: _ffi.ah_plugin_info) -> PluginInfo:
    probe = None
    if p.probe:
        q = p.probe.contents
        probe = ProbeInfo(bool(q.usable), _ffi.s(q.reason), _ffi.s(q.device_name),
                          _ffi.s(q.arch), q.compute_capability, q.device_count,
                          q.multiprocessors, q.memory_bytes, _ffi.s(q.driver_version))
    return PluginInfo(
        name=_ffi.s(p.name), state=PLUGIN_STATES[p.state] if 0 <= p.state < 4 else str(p.state),
        reason=_ffi.s(p.reason), device_kind=_ffi.s(lib.ah_device_kind_str(p.device_kind)),
        version=_ffi.s(p.version), vendor=_ffi.s(p.vendor), license=_ffi.s(p.license),
        description=_ffi.s(p.description), path=_ffi.s(p.path), probe=probe,
        caps=_caps_text(lib, p.caps.contents) if p.caps else {},
        from_cache=bool(p.from_cache), scan_ms=float(p.scan_ms))


class Host(Handle):
    """An attnhost host (ah_host): loads the configuration, gathers hardware
    facts and scans the plugin directories (crash-isolated, cached).

    Args:
        config_path: an INI configuration file.
        config_text: INI text, used when config_path is None; neither: the
            built-in defaults.
        plugin_dirs: directories searched before the configuration's
            ``[search]`` paths. The install's plugin directory beside the
            library is searched too (in a build tree: build/lib/attnhost/plugins).
        scan: "default" (what the configuration says), "child" (probe each
            new plugin in a child process) or "in_process" (no fork).
        cache_path: the scan cache; None: the configuration's or the default;
            "": no cache.
        no_default_dirs: skip the install's directory and $ATTNHOST_PLUGIN_PATH.

    A host may be used from many threads at once. It lives as long as any
    :class:`Selection` or :class:`Binding` made from it, whatever order
    they are collected in.
    """

    def __init__(self, config_path: Optional[Union[str, "os.PathLike[str]"]] = None,
                 config_text: Optional[str] = None,
                 plugin_dirs: Sequence[Union[str, "os.PathLike[str]"]] = (),
                 scan: str = "default", cache_path: Optional[str] = None,
                 no_default_dirs: bool = False) -> None:
        lib = _ffi.load()
        if scan not in _SCAN:
            raise ValueError(f"scan = {scan!r}: expected one of {', '.join(_SCAN)}")
        dirs = [os.fsencode(d) for d in plugin_dirs]
        arr = (ctypes.c_char_p * max(1, len(dirs)))(*dirs)
        o = _ffi.ah_host_options()
        o.struct_size = ctypes.sizeof(o)
        o.config_path = os.fsencode(config_path) if config_path is not None else None
        o.config_text = config_text.encode() if config_text is not None else None
        o.plugin_dirs = arr if dirs else None
        o.n_plugin_dirs = len(dirs)
        o.no_default_dirs = int(no_default_dirs)
        o.scan_mode = _SCAN[scan]
        o.cache_path = cache_path.encode() if cache_path is not None else None
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_host_create(ctypes.byref(o), ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        self._adopt(out.value, lib.ah_host_destroy)

    # -- versions ---------------------------------------------------------

    @staticmethod
    def version() -> str:
        """The library's version."""
        return version()

    @staticmethod
    def abi_version() -> tuple:
        """The library's plugin ABI (major, minor)."""
        return abi_version()

    # -- plugins ----------------------------------------------------------

    def plugins(self) -> List[PluginInfo]:
        """Every plugin file found, with its state and, when not available,
        the reason."""
        lib = _ffi.load()
        h = self._handle()
        return [_plugin_info(lib, lib.ah_host_plugin(h, i).contents)
                for i in range(lib.ah_host_plugin_count(h))]

    def plugin(self, name: str) -> Optional[PluginInfo]:
        """The plugin of that name, or None."""
        lib = _ffi.load()
        p = lib.ah_host_find_plugin(self._handle(), name.encode())
        return _plugin_info(lib, p.contents) if p else None

    def hw_facts(self) -> Dict[str, object]:
        """Hardware facts the host gathered (CPU ISA, cores, memory)."""
        lib = _ffi.load()
        f = lib.ah_host_hw_facts(self._handle()).contents
        return {"cpu_vendor": _ffi.s(f.cpu_vendor), "cpu_model": _ffi.s(f.cpu_model),
                "cpu_isa": _fmt(lib.ah_format_isa, f.cpu_isa),
                "cpu_logical_cores": f.cpu_logical_cores, "memory_bytes": f.memory_bytes,
                "amx_note": _ffi.s(f.amx_note)}

    def config_dump(self, effective: bool = True) -> str:
        """The configuration as INI, every key with its documentation;
        effective=True shows the values in force."""
        lib = _ffi.load()
        p = ctypes.c_void_p()
        st = lib.ah_host_config_dump(self._handle(), int(effective), ctypes.byref(p))
        if st:
            raise error_for(st, _ffi.s(lib.ah_host_errmsg(self._handle())))
        try:
            return ctypes.string_at(p.value).decode()
        finally:
            ctypes.CDLL(None).free(p)

    @property
    def config_warnings(self) -> List[str]:
        """Warnings the configuration produced."""
        return [w for w in _ffi.s(_ffi.load().ah_host_config_warnings(self._handle()))
                .splitlines() if w]

    # -- selection --------------------------------------------------------

    def select(self, model: Model, force: Optional[str] = None) -> "Selection":
        """Choose a plugin for every layer and phase of model (or force
        every layer onto one plugin). Raises when a layer cannot be served;
        the message lists the reasons."""
        from .selection import Selection

        lib = _ffi.load()
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        if force is None:
            st = lib.ah_host_select(self._handle(), model._handle(), ctypes.byref(out),
                                    ctypes.byref(err))
        else:
            st = lib.ah_host_select_forced(self._handle(), model._handle(), force.encode(),
                                           ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        return Selection(self, model, out.value)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.plugins())} plugins"
        return f"attnhost.Host({state})"
