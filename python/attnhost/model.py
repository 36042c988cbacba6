"""Model descriptions: the attention layers of a model (ah_model)."""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _ffi
from ._handle import Handle
from .errors import error_for

DTYPES = ("auto", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz")
ATTN_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")
KV_LAYOUTS = ("auto", "nhd", "hnd", "nhd_interleaved", "hnd_interleaved")  # ah_kv_layout
KV_SCALES = ("host", "tensor", "per_head")  # ah_kv_scales (ABI 2.3)
LAYER_KINDS = ("attention", "mamba", "linear_attention", "gdn", "mlp_only", "other")
HF_KV_GROUPS = ("one", "hybrid")  # ah_hf_kv_groups
BLOCK_SIZE_AUTO = 0xFFFFFFFF  # AH_BLOCK_SIZE_AUTO: block_size = "auto" (ABI 2.3)


@dataclass
class LayerSpec:
    """What one attention layer needs: the keys of a ``[layers.<range>]``
    section of a model description (docs/configuration.md, "Model
    descriptions").

    ``head_size`` sets ``qk_head_size`` and ``v_head_size`` together; ``None``
    means "not set" (the description's default applies). Specs read back
    from a model or a selection have every size filled in; their dtype,
    kv_dtype and kv_layout are resolved in a selection's decisions.
    """

    num_q_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    head_size: Optional[int] = None
    qk_head_size: Optional[int] = None
    v_head_size: Optional[int] = None
    attn_type: str = "decoder"
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    block_size: Union[int, str] = 16  # "auto": the prefill winner's preferred size
    kv_layout: str = "auto"
    sliding_window: int = 0
    softcap: float = 0.0
    scale: float = 0.0
    sinks: bool = False
    alibi: bool = False
    fp8_attention: bool = False
    mla: bool = False
    kv_lora_rank: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    kind: str = "attention"  # a non-attention layer of a hybrid model: "mamba", "gdn", ...
    kv_group: int = 0  # the layer's KV-cache group (ABI 2.1)
    kv_scales: str = "host"  # how FP8 scales come: "host", "tensor", "per_head" (ABI 2.3)
    q_scale: bool = False  # FP8 attention with the engine's query scale (ABI 2.3)

    def _check_choices(self) -> None:
        for name, choices in (("attn_type", ATTN_TYPES), ("dtype", DTYPES[1:]),
                              ("kv_dtype", DTYPES), ("kv_layout", KV_LAYOUTS),
                              ("kind", LAYER_KINDS), ("kv_scales", KV_SCALES)):
            v = getattr(self, name)
            if v not in choices:
                raise ValueError(f"LayerSpec.{name} = {v!r}: expected one of {', '.join(choices)}")
        if isinstance(self.block_size, str) and self.block_size != "auto":
            raise ValueError(f"LayerSpec.block_size = {self.block_size!r}: a whole number or 'auto'")

    def ini_lines(self) -> List[str]:
        """The description lines of this spec: keys left at None or at the
        description's default are omitted; a non-attention layer is its
        kind alone."""
        self._check_choices()
        if self.kind != "attention":
            return [f"kind = {self.kind}"]
        out = []
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or v == f.default:
                continue
            key = f.name
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, float):
                v = repr(v)
            out.append(f"{key} = {v}")
        return out

    def _to_c(self) -> _ffi.ah_layer_spec:
        """The C spec of ah_model_create: zeros where this spec says None."""
        self._check_choices()
        c = _ffi.ah_layer_spec()
        c.struct_size = ctypes.sizeof(c)
        if self.kind != "attention":
            return c
        if not self.mla and (self.kv_lora_rank is not None or self.qk_rope_head_dim is not None):
            raise ValueError("LayerSpec: kv_lora_rank and qk_rope_head_dim apply only to mla layers")
        qk = self.qk_head_size if self.qk_head_size is not None else self.head_size
        v = self.v_head_size if self.v_head_size is not None else self.head_size
        if self.mla and qk is None and v is None:
            rank = 512 if self.kv_lora_rank is None else self.kv_lora_rank
            qk, v = rank + (64 if self.qk_rope_head_dim is None else self.qk_rope_head_dim), rank
        c.attn_type = ATTN_TYPES.index(self.attn_type)
        c.num_q_heads = self.num_q_heads or 0
        c.num_kv_heads = self.num_kv_heads or 0
        c.qk_head_size = qk or 0
        c.v_head_size = v or 0
        c.q_dtype = DTYPES.index(self.dtype)
        c.kv_dtype = DTYPES.index(self.kv_dtype)
        c.block_size = _block_size_c(self.block_size)
        c.kv_layout = KV_LAYOUTS.index(self.kv_layout)
        c.sliding_window = self.sliding_window
        c.softcap = self.softcap
        c.scale = self.scale
        c.use_mla, c.use_sinks = int(self.mla), int(self.sinks)
        c.use_alibi, c.fp8_attention = int(self.alibi), int(self.fp8_attention)
        c.kv_group = self.kv_group
        c.kv_scales = KV_SCALES.index(self.kv_scales)
        c.use_q_scale = int(self.q_scale)
        return c

    @classmethod
    def _from_c(cls, c: _ffi.ah_layer_spec) -> "LayerSpec":
        same = c.qk_head_size == c.v_head_size
        return cls(
            num_q_heads=c.num_q_heads, num_kv_heads=c.num_kv_heads,
            head_size=c.qk_head_size if same else None,
            qk_head_size=c.qk_head_size, v_head_size=c.v_head_size,
            attn_type=_name(ATTN_TYPES, c.attn_type), dtype=_name(DTYPES, c.q_dtype),
            kv_dtype=_name(DTYPES, c.kv_dtype),
            block_size="auto" if c.block_size == BLOCK_SIZE_AUTO else c.block_size,
            kv_layout=_name(KV_LAYOUTS, c.kv_layout), sliding_window=c.sliding_window,
            softcap=float(c.softcap), scale=float(c.scale), sinks=bool(c.use_sinks),
            alibi=bool(c.use_alibi), fp8_attention=bool(c.fp8_attention), mla=bool(c.use_mla),
            kv_group=c.kv_group, kv_scales=_name(KV_SCALES, c.kv_scales),
            q_scale=bool(c.use_q_scale))

    def describe(self) -> str:
        """One line, as ``attnhost explain`` prints a spec."""
        s = (f"{self.attn_type} {self.num_q_heads}/{self.num_kv_heads} heads qk "
             f"{self.qk_head_size} v {self.v_head_size} {self.dtype} kv {self.kv_dtype} "
             f"block {self.block_size} {self.kv_layout}")
        if self.sliding_window:
            s += f" window {self.sliding_window}"
        if self.softcap > 0:
            s += f" softcap {self.softcap:g}"
        for flag, word in ((self.mla, "mla"), (self.sinks, "sinks"), (self.alibi, "alibi"),
                           (self.fp8_attention, "fp8-attention"), (self.q_scale, "q-scale")):
            if flag:
                s += " " + word
        if self.kv_scales != "host":
            s += f" scales {self.kv_scales}"
        return s


def _name(table: Sequence[str], i: int) -> str:
    return table[i] if 0 <= i < len(table) else f"?{i}"


def _block_size_c(v: Union[int, str]) -> int:
    if v == "auto":
        return BLOCK_SIZE_AUTO
    if isinstance(v, str):
        raise ValueError(f"block_size = {v!r}: a whole number or 'auto'")
    return int(v)


class Model(Handle):
    """A parsed model description (immutable). Build one with
    :meth:`from_ini`, :meth:`from_text`, :meth:`from_specs` or :meth:`demo`.
    A model may be closed once its selections are made (they copy the
    specs)."""

    def __init__(self, _ptr: int, _text: Optional[str] = None) -> None:
        lib = _ffi.load()
        self._adopt(_ptr, lib.ah_model_destroy)
        self.text = _text  # the description, when built from text

    @classmethod
    def from_ini(cls, path: Union[str, "os.PathLike[str]"]) -> "Model":
        """Load a model description file."""
        lib = _ffi.load()
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_model_load(os.fsencode(path), ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        return cls(out.value)

    @classmethod
    def from_text(cls, text: str, source: str = "<text>") -> "Model":
        """Parse a model description; ``source`` names it in messages."""
        lib = _ffi.load()
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_model_parse(text.encode(), source.encode(), ctypes.byref(out),
                                ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        return cls(out.value, text)

    @classmethod
    def from_specs(cls, name: str, layers: Sequence[LayerSpec]) -> "Model":
        """A model of the given layers (layer i is ``layers[i]``), built by
        ``ah_model_create``: the library checks every layer as it checks a
        description's. A layer's ``kind`` other than "attention" makes it a
        non-attention layer of a hybrid model. ``text`` is the model as a
        description (``ah_model_to_ini``)."""
        if not layers:
            raise ValueError("a model needs at least one layer")
        n = len(layers)
        specs = (_ffi.ah_layer_spec * n)(*[l._to_c() for l in layers])
        kinds = (_ffi.c_enum * n)(*[LAYER_KINDS.index(l.kind) for l in layers])
        desc = _ffi.ah_model_desc(ctypes.sizeof(_ffi.ah_model_desc), name.encode(), n, specs, kinds)
        lib = _ffi.load()
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_model_create(ctypes.byref(desc), ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        m = cls(out.value)
        try:
            m.text = m.to_ini()
        except ValueError:
            m.text = None  # a name INI text cannot hold
        return m

    @classmethod
    def from_hf_config(cls, config: Union[Dict[str, Any], str, "os.PathLike[str]"], *,
                       dtype: Optional[str] = None, kv_dtype: Optional[str] = None,
                       block_size: Union[int, str] = 0, tensor_parallel: int = 0,
                       name: Optional[str] = None, chunked_virtual_batches: bool = False,
                       kv_groups: str = "one", source: Optional[str] = None) -> "Model":
        """A model from a Hugging Face ``config.json``: a dict, or the path
        of the file (``ah_model_import_hf``; docs/configuration.md lists the
        families). ``dtype`` overrides ``torch_dtype``; ``block_size`` 0 is
        16, "auto" the prefill winner's preferred size; ``tensor_parallel``
        gives the heads of one rank. ``kv_groups="hybrid"`` puts each class
        of cache layers (sliding window, KV shape) in a KV-cache group of
        its own, as vLLM's hybrid KV-cache manager does; "one" (the
        default) keeps every layer in group 0. A config the importer cannot
        describe exactly raises :class:`ConfigError` naming the field."""
        lib = _ffi.load()
        if isinstance(config, dict):
            text, src = json.dumps(config), source or "<config>"
        else:
            with open(config, "rb") as f:
                text, src = f.read().decode(), source or os.fspath(config)
        for what, v, choices in (("dtype", dtype, DTYPES[1:4]), ("kv_dtype", kv_dtype, DTYPES[1:])):
            if v is not None and v not in choices:
                raise ValueError(f"{what} = {v!r}: expected one of {', '.join(choices)}")
        if kv_groups not in HF_KV_GROUPS:
            raise ValueError(f"kv_groups = {kv_groups!r}: expected one of {', '.join(HF_KV_GROUPS)}")
        o = _ffi.ah_hf_import_options(
            ctypes.sizeof(_ffi.ah_hf_import_options), DTYPES.index(dtype) if dtype else 0,
            DTYPES.index(kv_dtype) if kv_dtype else 0, _block_size_c(block_size), tensor_parallel,
            name.encode() if name else None, int(chunked_virtual_batches), 0,
            HF_KV_GROUPS.index(kv_groups))
        out, err = ctypes.c_void_p(), _ffi.ah_error()
        st = lib.ah_model_import_hf_opts(text.encode(), src.encode(), ctypes.byref(o),
                                         ctypes.byref(out), ctypes.byref(err))
        if st:
            raise error_for(st, _ffi.s(err.msg))
        m = cls(out.value)
        try:
            m.text = m.to_ini()
        except ValueError:
            m.text = None
        return m

    def to_ini(self) -> str:
        """The model as a model description that parses back to it."""
        lib = _ffi.load()
        p = ctypes.c_void_p()
        st = lib.ah_model_to_ini(self._handle(), ctypes.byref(p))
        if st:
            raise ValueError(f"model {self.name!r}: its name cannot stand in INI text")
        try:
            return ctypes.string_at(p.value).decode()
        finally:
            ctypes.CDLL(None).free(p)

    def layer_kind(self, i: int) -> str:
        """"attention", or the kind of a hybrid model's non-attention layer."""
        n = self.num_layers
        if not 0 <= i < n:
            raise IndexError(f"layer {i}: the model has {n} layers")
        return LAYER_KINDS[_ffi.load().ah_model_layer_kind(self._handle(), i)]

    @classmethod
    def demo(cls) -> "Model":
        """The built-in demo model (global, sliding-window and MLA layers)."""
        return cls.from_text(_ffi.s(_ffi.load().ah_demo_model_text()), "<demo>")

    @property
    def name(self) -> str:
        return _ffi.s(_ffi.load().ah_model_name(self._handle()))

    @property
    def num_layers(self) -> int:
        return int(_ffi.load().ah_model_num_layers(self._handle()))

    @property
    def num_kv_groups(self) -> int:
        """KV-cache groups: 1 + the largest kv_group of a layer with a cache."""
        return int(_ffi.load().ah_model_num_kv_groups(self._handle()))

    def layer(self, i: int) -> LayerSpec:
        """Layer i as described (kv_dtype and kv_layout may be "auto")."""
        n = self.num_layers
        if not 0 <= i < n:
            raise IndexError(f"layer {i}: the model has {n} layers")
        spec = LayerSpec._from_c(_ffi.load().ah_model_layer(self._handle(), i).contents)
        spec.kind = self.layer_kind(i)
        return spec

    def layers(self) -> Iterator[LayerSpec]:
        return (self.layer(i) for i in range(self.num_layers))

    def __repr__(self) -> str:
        return f"attnhost.Model({self.name!r}, {self.num_layers} layers)"


def specs_to_ini(name: str, layers: Sequence[LayerSpec]) -> str:
    """The model description text of :meth:`Model.from_specs`."""
    if not layers:
        raise ValueError("a model needs at least one layer")
    if any(c in name for c in "\n[]#;"):
        raise ValueError(f"model name {name!r} contains characters an INI value cannot hold")
    lines = ["[model]", f"name = {name}", f"num_layers = {len(layers)}"]
    i = 0
    while i < len(layers):
        body = layers[i].ini_lines()
        j = i
        while j + 1 < len(layers) and layers[j + 1].ini_lines() == body:
            j += 1
        lines += ["", f"[layers.{i}-{j}]" if j > i else f"[layers.{i}]"] + body
        i = j + 1
    return "\n".join(lines) + "\n"
