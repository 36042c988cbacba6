"""A small continuous-batching generation engine: a Hugging Face causal LM's
own modules (embeddings, projections, rotary, norms, MLP from
``transformers``) with attention through attnhost over a paged KV cache.

What it shows, in about 350 lines:

- the model description comes from the model's own config
  (``attnhost.Model.from_hf_config``), so windows, soft-caps, scales and
  sinks are the ones transformers uses;
- attention is hooked through transformers' attention-function registry
  (``AttentionInterface``, ``ALL_ATTENTION_FUNCTIONS``): every attention
  module calls :func:`attnhost_attention`, which hands the step's new
  query/key/value to ``Binding.forward`` (that stores K/V in the paged
  cache through the slot mapping and attends over the cached context);
- DeepSeek's MLA layers are served absorbed (:func:`mla_attention`): the
  cache holds the compressed kv and the roped k_pe, W_UK is folded into the
  query and W_UV applied to the output, as vLLM's MLA backend does;
- each step is ONE flat sequence of tokens ([1, T]) of several requests:
  decodes first (one token each), then prefill chunks, so a binding whose
  decode and prefill winners differ splits the step; position ids carry each
  token's position in its own request, so rotary is per request;
- blocks come from a free list in scrambled order, a long prompt is
  prefilled in chunks over several steps, and a finished request's blocks
  go back to the free list for the next ones.

    python3 examples/engine/engine.py                       # CPU, fp32, cpu_amx
    python3 examples/engine/engine.py --device cuda --dtype bf16 --plugin cuda_fa3
    python3 examples/engine/engine.py --family deepseek_v3     # MLA, absorbed

(set ``ATTNHOST_LIB`` to the build's ``lib/libattnhost.so``; a build tree
``build/`` beside the sources is found without it.)
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))
if not os.environ.get("ATTNHOST_LIB"):
    for _b in ("build", "build-cpu", "build-gpu"):
        if (ROOT / _b / "lib" / "libattnhost.so").exists():
            os.environ["ATTNHOST_LIB"] = str(ROOT / _b / "lib" / "libattnhost.so")
            break

import torch  # noqa: E402

import attnhost  # noqa: E402

ATTN_NAME = "attnhost"
_ACTIVE: List["Engine"] = []      # the engine whose step is running (attention hook)


def attnhost_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                       **kwargs):
    """transformers' attention-function signature: query [1, Hq, T, D], key
    and value [1, Hkv, T, D] (the step's new tokens, rotary applied);
    returns ([1, T, Hq, Dv], None). Masks, windows, soft-cap and scale are
    the binding's (from the same config), so attention_mask is not used."""
    eng = _ACTIVE[-1]
    layer = module.layer_idx
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
    sinks = kwargs.get("s_aux", getattr(module, "sinks", None))
    if sinks is not None:
        sinks = sinks.detach().float().contiguous()
    kc, vc = eng.cache.tensors(layer)
    eng.binding.forward(layer, q, k, v, kc, vc, out, sinks=sinks)
    return out.unsqueeze(0), None


def mla_attention(module, hidden_states, position_embeddings, attention_mask=None, **kwargs):
    """DeepSeek's multi-head latent attention served absorbed, as vLLM's MLA
    backend does. The cache holds one KV "head" per token: the normalized
    compressed kv (kv_lora_rank channels) then the roped k_pe
    (qk_rope_head_dim); V is its first kv_lora_rank channels. W_UK goes into
    the query (per head, q_nope @ W_UK -> kv_lora_rank channels, then the
    roped q_pe) and W_UV onto the output (per head, kv_lora_rank ->
    v_head_dim) before o_proj, so K and V are never expanded per head. The
    scale is the model's (1/sqrt(qk_nope + qk_rope) times any YaRN mscale^2),
    which Engine.check_scales compares with the imported one. Replaces the
    forward of transformers' DeepseekV3Attention (its projections, norms and
    rotary are used as they are) while the model's attention is attnhost's."""
    m = module
    eng = _ACTIVE[-1]
    T = hidden_states.shape[1]
    H, dn, dr, r = m.num_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
    if m.q_lora_rank is None:
        q = m.q_proj(hidden_states)
    else:
        q = m.q_b_proj(m.q_a_layernorm(m.q_a_proj(hidden_states)))
    q_nope, q_pe = q.view(1, T, H, dn + dr).transpose(1, 2).split([dn, dr], dim=-1)
    ckv, k_pe = m.kv_a_proj_with_mqa(hidden_states).split([r, dr], dim=-1)
    ckv = m.kv_a_layernorm(ckv)
    hf = sys.modules[type(m).__module__]       # the model's own rotary
    interleave = m.config.rope_interleave
    rope = hf.apply_rotary_pos_emb_interleave if interleave else hf.apply_rotary_pos_emb
    q_pe, k_pe = rope(q_pe, k_pe.view(1, 1, T, dr), *position_embeddings)
    # kv_b_proj.weight is [H * (qk_nope + v_head), kv_lora_rank]: per head W_UK then W_UV
    w_uk, w_uv = m.kv_b_proj.weight.view(H, dn + m.v_head_dim, r).split([dn, m.v_head_dim], dim=1)
    q_lat = torch.einsum("htd,hdr->thr", q_nope[0], w_uk)
    query = torch.cat((q_lat, q_pe[0].transpose(0, 1)), dim=-1).contiguous()   # [T, H, r + dr]
    key = torch.cat((ckv[0], k_pe[0, 0]), dim=-1).unsqueeze(1).contiguous()    # [T, 1, r + dr]
    out = torch.empty(T, H, r, dtype=query.dtype, device=query.device)
    kc, _ = eng.cache.tensors(m.layer_idx)
    eng.binding.forward(m.layer_idx, query, key, None, kc, None, out)
    o = torch.einsum("thr,hvr->thv", out, w_uv).reshape(1, T, H * m.v_head_dim)
    return m.o_proj(o), None


def _is_mla(module) -> bool:
    return hasattr(module, "kv_lora_rank") and hasattr(module, "kv_b_proj")


def _no_mask(*args, **kwargs):
    return None


def register_attention() -> None:
    """Register ``attnhost`` as an attention implementation (and a mask
    function that builds no mask: the binding knows the causal/window
    structure from the batch)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, attnhost_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(ATTN_NAME, _no_mask)
    except ImportError:  # older transformers: masks are built for every implementation
        pass


def set_attention(model, name: str) -> None:
    """Switch model's attention to name; for attnhost, MLA modules' forward
    becomes :func:`mla_attention` (the attention function hook only sees
    expanded per-head K/V), and any other name gives theirs back."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name
    for mod in model.modules():
        if not _is_mla(mod):
            continue
        if name == ATTN_NAME:
            mod.forward = functools.partial(mla_attention, mod)
        else:
            mod.__dict__.pop("forward", None)


@dataclass
class Request:
    rid: int
    prompt: List[int]
    max_new_tokens: int
    generated: List[int] = field(default_factory=list)
    blocks: List[int] = field(default_factory=list)
    num_cached: int = 0                 # tokens whose K/V are in the cache
    logits: List[torch.Tensor] = field(default_factory=list)   # one row per sampled token
    block_history: List[List[int]] = field(default_factory=list)

    @property
    def tokens(self) -> List[int]:
        return self.prompt + self.generated

    @property
    def done(self) -> bool:
        return len(self.generated) >= self.max_new_tokens


class Engine:
    """Continuous batching over one binding.

    Args:
        model: a ``transformers`` causal LM (any dtype/device).
        plugin: force this plugin for every layer and phase (None: the
            host's selection).
        block_size, num_blocks: the paged cache.
        max_num_reqs, max_tokens_per_step: the scheduler's limits; a prompt
            longer than what is left of the step's token budget is prefilled
            in chunks over several steps.
    """

    def __init__(self, model, *, plugin: Optional[str] = None, block_size: int = 16,
                 num_blocks: int = 64, max_num_reqs: int = 8, max_tokens_per_step: int = 64,
                 max_seq_len: int = 512, seed: int = 0, scan_cache: str = "") -> None:
        self.model = model
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        ah_dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[p.dtype]
        cfg = model.config.to_dict()
        self.desc = attnhost.Model.from_hf_config(cfg, dtype=ah_dtype, block_size=block_size)
        # The model's tensors live on one device, so no layer may fall back
        # to a plugin on another (a GPU model's layer that no GPU plugin
        # serves fails the selection instead of binding to the CPU).
        conf = "[select]\n" + (f"priority = {plugin}\n" if plugin else "")
        if plugin or self.device.type != "cpu":
            conf += "fallback = error\n"
        self.host = attnhost.Host(config_text=conf, cache_path=scan_cache)
        self.selection = self.host.select(self.desc)
        self.block_size = block_size
        self.max_blocks_per_req = -(-max_seq_len // block_size)
        self.binding = attnhost.Binding(
            self.host, self.selection, max_num_reqs=max_num_reqs,
            max_num_tokens=max_tokens_per_step, max_blocks_per_req=self.max_blocks_per_req,
            max_seq_len=max_seq_len, num_blocks=num_blocks)
        cpu = self.binding.device(0, "prefill").kind == "cpu"
        self.cache = attnhost.PagedKVCache(self.binding, allocator="numpy" if cpu else "torch")
        self.builder = attnhost.BatchBuilder(self.binding)
        self.max_num_reqs, self.max_tokens = max_num_reqs, max_tokens_per_step
        free = list(range(num_blocks))
        random.Random(seed).shuffle(free)         # scrambled block order
        self.free: List[int] = free
        self.waiting: List[Request] = []
        self.running: List[Request] = []          # prompt fully cached: decoding
        self.prefilling: List[Request] = []       # prompt partly cached
        self.finished: List[Request] = []
        self.steps: List[dict] = []
        self._next_id = 0
        self.check_scales()

    def check_scales(self) -> None:
        """The attention scale each HF module uses must be the one attnhost
        imported from the config."""
        for i, mod in enumerate(m for m in self.model.modules() if hasattr(m, "layer_idx")
                                and hasattr(m, "scaling")):
            spec = self.selection.decision(mod.layer_idx, "prefill").spec
            want = float(mod.scaling)
            got = spec.scale or spec.qk_head_size ** -0.5
            if abs(got - want) > 1e-6 * want:
                raise RuntimeError(f"layer {mod.layer_idx}: attnhost scale {got} != model {want}")

    # -- requests ----------------------------------------------------------
    def add_request(self, prompt: List[int], max_new_tokens: int) -> Request:
        r = Request(self._next_id, list(prompt), max_new_tokens)
        self._next_id += 1
        self.waiting.append(r)
        return r

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.prefilling)

    def _grow(self, r: Request, upto: int) -> bool:
        need = -(-upto // self.block_size) - len(r.blocks)
        if need > len(self.free):
            return False
        for _ in range(need):
            r.blocks.append(self.free.pop())
        return True

    def _finish(self, r: Request) -> None:
        self.running.remove(r)
        r.block_history.append(list(r.blocks))
        self.free.extend(reversed(r.blocks))   # reused by the next allocations
        r.blocks = []
        self.finished.append(r)

    # -- one step ------------------------------------------------------------
    def schedule(self):
        """Decodes first, then prefill chunks within the token budget."""
        sched, budget = [], self.max_tokens
        for r in self.running:
            if len(sched) == self.max_num_reqs or budget < 1:
                break
            if self._grow(r, r.num_cached + 1):
                sched.append((r, 1))
                budget -= 1
        while self.waiting and len(self.prefilling) < self.max_num_reqs:
            self.prefilling.append(self.waiting.pop(0))
        for r in self.prefilling:
            if len(sched) == self.max_num_reqs or budget < 1:
                break
            n = min(len(r.prompt) - r.num_cached, budget)
            if self._grow(r, r.num_cached + n):
                sched.append((r, n))
                budget -= n
        return sched

    @torch.no_grad()
    def step(self) -> dict:
        sched = self.schedule()
        if not sched:
            raise RuntimeError("no request fits (cache full)")
        ids, pos = [], []
        for r, n in sched:
            toks = r.tokens
            ids += toks[r.num_cached:r.num_cached + n]
            pos += list(range(r.num_cached, r.num_cached + n))
        table = [r.blocks for r, _ in sched]
        batch = self.builder.build(query_lens=[n for _, n in sched],
                                   context_lens=[r.num_cached for r, _ in sched],
                                   block_ids=table)
        self.binding.plan(batch)
        info = {"reqs": [(r.rid, n, r.num_cached) for r, n in sched],
                "phase": self.binding.phase, "split": tuple(self.binding.split)}
        dev = self.device
        inp = torch.tensor([ids], dtype=torch.long, device=dev)
        pid = torch.tensor([pos], dtype=torch.long, device=dev)
        _ACTIVE.append(self)
        try:
            logits = self.model(input_ids=inp, position_ids=pid, use_cache=False).logits[0]
        finally:
            _ACTIVE.pop()
        t = 0
        for r, n in sched:
            t += n
            r.num_cached += n
            if r in self.prefilling and r.num_cached == len(r.prompt):
                self.prefilling.remove(r)
                self.running.append(r)
            if r.num_cached == len(r.tokens):      # its last token was in: sample
                row = logits[t - 1].float()
                r.logits.append(row.cpu())
                r.generated.append(int(row.argmax()))
                if r.done:
                    self._finish(r)
        self.steps.append(info)
        return info

    def run(self, arrivals: Optional[Dict[int, List[tuple]]] = None) -> List[Request]:
        """Steps until every request is finished; arrivals[s] are
        (prompt, max_new_tokens) added before step s."""
        arrivals = dict(arrivals or {})
        s = 0
        while self.has_work() or any(k >= s for k in arrivals):
            for prompt, n in arrivals.pop(s, []):
                self.add_request(prompt, n)
            if self.has_work():
                self.step()
            s += 1
        return sorted(self.finished, key=lambda r: r.rid)

    def close(self) -> None:
        for o in (self.builder, self.cache, self.binding, self.selection, self.host):
            if hasattr(o, "close"):
                o.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--plugin", default=None, help="force this plugin (default: selection)")
    ap.add_argument("--family", default="llama")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tiny_models import build_model, workload

    register_attention()
    model = build_model(a.family, a.dtype, a.device)
    set_attention(model, ATTN_NAME)
    eng = Engine(model, plugin=a.plugin or ("cpu_amx" if a.device == "cpu" else None))
    for req in eng.run(workload(model.config.vocab_size)):
        print(f"request {req.rid}: prompt {len(req.prompt)} tokens -> {req.generated}")
    for i, s in enumerate(eng.steps):
        print(f"step {i}: {s['phase']:<7} split {s['split'][:2]} reqs (id, new, cached) {s['reqs']}")
    eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
