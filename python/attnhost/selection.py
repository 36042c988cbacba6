"""Selections: which plugin serves each layer and phase, and why."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import _ffi
from ._handle import Handle
from .model import LayerSpec, Model

if TYPE_CHECKING:
    from .host import Host

PHASES = ("prefill", "decode")


def phase_index(phase) -> int:
    """0 for "prefill", 1 for "decode" (ints pass through)."""
    if isinstance(phase, str):
        try:
            return PHASES.index(phase)
        except ValueError:
            raise ValueError(f"phase {phase!r}: expected prefill or decode") from None
    if phase not in (0, 1):
        raise ValueError(f"phase {phase!r}: expected 0 (prefill) or 1 (decode)")
    return int(phase)


@dataclass(frozen=True)
class Reason:
    """Why a plugin cannot serve a layer (ah_reason)."""

    code: str        # "head_size", "dtype", "lost_on_priority", ...
    field: str       # the spec field checked
    value: str       # the layer's value
    supported: str   # what the plugin supports

    def __str__(self) -> str:
        return f"{self.code}: {self.field} = {self.value}; supported: {self.supported}"


@dataclass(frozen=True)
class Candidate:
    """One plugin considered for a layer and phase."""

    plugin: str
    chosen: bool
    reasons: Tuple[Reason, ...]


@dataclass(frozen=True)
class Decision:
    """The decision for one layer and phase (ah_decision)."""

    layer: int
    phase: str
    plugin: Optional[str]      # None when nothing could serve the layer
    list_source: str           # where the priority list came from
    fallback: bool             # no listed candidate fit; another was taken
    spec: LayerSpec            # resolved: kv_dtype, kv_layout and scale filled
    candidates: Tuple[Candidate, ...]
    kind: str = "attention"    # a non-attention layer's kind: never selected (plugin None)
    kernel_block_size: int = 0  # ABI 2.3: the plugin runs spec.block_size as blocks of this


class Selection(Handle):
    """The outcome of :meth:`Host.select` (immutable, any thread). Keeps its
    host alive; a :class:`Binding` keeps the selection alive."""

    def __init__(self, host: "Host", model: Model, ptr: int) -> None:
        lib = _ffi.load()
        self._adopt(ptr, lib.ah_selection_destroy, (host,))
        self.host = host
        self.model_name = model.name
        self._cache: Dict[Tuple[int, int], Decision] = {}

    @property
    def num_layers(self) -> int:
        return int(_ffi.load().ah_selection_num_layers(self._handle()))

    def decision(self, layer: int, phase="prefill") -> Decision:
        """The decision for layer in phase ("prefill" or "decode")."""
        p = phase_index(phase)
        d = self._cache.get((layer, p))
        if d is not None:
            return d
        lib = _ffi.load()
        n = self.num_layers
        if not 0 <= layer < n:
            raise IndexError(f"layer {layer}: the selection has {n} layers")
        c = lib.ah_selection_decision(self._handle(), layer, p).contents
        cands = []
        for i in range(c.n_candidates):
            cd = c.candidates[i]
            reasons = tuple(
                Reason(_ffi.s(lib.ah_reason_code_str(r.code)), _ffi.s(r.field), _ffi.s(r.value),
                       _ffi.s(r.supported))
                for r in (cd.reasons[k] for k in range(cd.n_reasons)))
            cands.append(Candidate(_ffi.s(cd.plugin), bool(cd.chosen), reasons))
        kind = _ffi.s(lib.ah_layer_kind_str(lib.ah_selection_layer_kind(self._handle(), layer)))
        d = Decision(layer, PHASES[p], _ffi.s(c.plugin) or None, _ffi.s(c.list_source),
                     bool(c.fallback), LayerSpec._from_c(c.spec), tuple(cands), kind,
                     int(c.kernel_block_size))
        self._cache[(layer, p)] = d
        return d

    @property
    def decisions(self) -> List[Tuple[Decision, Decision]]:
        """(prefill, decode) decisions of every layer."""
        return [(self.decision(i, 0), self.decision(i, 1)) for i in range(self.num_layers)]

    def plugins(self, phase="prefill") -> List[Optional[str]]:
        """The winning plugin of every layer in phase."""
        return [self.decision(i, phase).plugin for i in range(self.num_layers)]

    @property
    def graph_level(self) -> Tuple[str, int]:
        """The model's CUDA-graph level ("NEVER", ..., "ALWAYS") and the
        layer that set it (the minimum over the bound layers)."""
        lib = _ffi.load()
        layer = ctypes.c_uint32(0)
        g = lib.ah_selection_graph_level(self._handle(), ctypes.byref(layer))
        return _ffi.s(lib.ah_graph_level_str(g)), int(layer.value)

    @property
    def mixed_steps(self) -> Tuple[str, int, float, float]:
        """How a binding of this selection runs steps of decode and prefill
        requests: ("split" or "whole", the layers with two winners, and
        under ``[select] mixed_steps = measured`` the tune table's whole and
        split sums in ms, else -1.0 each)."""
        lib = _ffi.load()
        n, whole, split = ctypes.c_uint32(0), ctypes.c_double(0), ctypes.c_double(0)
        how = lib.ah_selection_mixed_steps(self.host._handle(), self._handle(), ctypes.byref(n),
                                           ctypes.byref(whole), ctypes.byref(split))
        return ("whole" if how == 2 else "split", int(n.value), whole.value, split.value)

    @property
    def warnings(self) -> List[str]:
        """Warnings from ``[select] fallback = warn``."""
        return [w for w in _ffi.s(_ffi.load().ah_selection_warnings(self._handle()))
                .splitlines() if w]

    def explain(self, layer: Optional[int] = None) -> str:
        """The decision table with every candidate's reasons, as
        ``attnhost explain`` prints it (one layer, or all)."""
        n = self.num_layers
        lines = [f"model {self.model_name}: {n} layers"]
        for l in range(n) if layer is None else [layer]:
            for p in PHASES:
                d = self.decision(l, p)
                lines += ["", f"layer {l} {p}: {d.plugin}{' (fallback)' if d.fallback else ''}",
                          f"  spec: {d.spec.describe()}", f"  list: {d.list_source}"]
                for c in d.candidates:
                    head = f"  {'->' if c.chosen else '':<2} {c.plugin:<16}"
                    if not c.reasons:
                        lines.append(head + " ok")
                    for k, r in enumerate(c.reasons):
                        lines.append((head if k == 0 else " " * len(head)) + f" {r}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        if self.closed:
            return "attnhost.Selection(closed)"
        return f"attnhost.Selection({self.model_name!r}, {self.num_layers} layers)"
