"""Model descriptions: the attention layers of a model (ah_model)."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, fields
from typing import Iterator, List, Optional, Sequence, Union

from . import _ffi
from ._handle import Handle
from .errors import error_for

DTYPES = ("auto", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
ATTN_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")
KV_LAYOUTS = ("auto", "nhd", "hnd")


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
    block_size: int = 16
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

    def ini_lines(self) -> List[str]:
        """The description lines of this spec: keys left at None or at the
        description's default are omitted."""
        for name, choices in (("attn_type", ATTN_TYPES), ("dtype", DTYPES[1:]),
                              ("kv_dtype", DTYPES), ("kv_layout", KV_LAYOUTS)):
            v = getattr(self, name)
            if v not in choices:
                raise ValueError(f"LayerSpec.{name} = {v!r}: expected one of {', '.join(choices)}")
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

    @classmethod
    def _from_c(cls, c: _ffi.ah_layer_spec) -> "LayerSpec":
        same = c.qk_head_size == c.v_head_size
        return cls(
            num_q_heads=c.num_q_heads, num_kv_heads=c.num_kv_heads,
            head_size=c.qk_head_size if same else None,
            qk_head_size=c.qk_head_size, v_head_size=c.v_head_size,
            attn_type=_name(ATTN_TYPES, c.attn_type), dtype=_name(DTYPES, c.q_dtype),
            kv_dtype=_name(DTYPES, c.kv_dtype), block_size=c.block_size,
            kv_layout=_name(KV_LAYOUTS, c.kv_layout), sliding_window=c.sliding_window,
            softcap=float(c.softcap), scale=float(c.scale), sinks=bool(c.use_sinks),
            alibi=bool(c.use_alibi), fp8_attention=bool(c.fp8_attention), mla=bool(c.use_mla))

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
                           (self.fp8_attention, "fp8-attention")):
            if flag:
                s += " " + word
        return s


def _name(table: Sequence[str], i: int) -> str:
    return table[i] if 0 <= i < len(table) else f"?{i}"


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
        """A model of the given layers (layer i is ``layers[i]``): writes the
        INI description (runs of equal specs share one section) and parses
        it, so the library's checks apply."""
        return cls.from_text(specs_to_ini(name, layers), f"<{name}>")

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

    def layer(self, i: int) -> LayerSpec:
        """Layer i as described (kv_dtype and kv_layout may be "auto")."""
        n = self.num_layers
        if not 0 <= i < n:
            raise IndexError(f"layer {i}: the model has {n} layers")
        return LayerSpec._from_c(_ffi.load().ah_model_layer(self._handle(), i).contents)

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
