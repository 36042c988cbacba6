"""Tiny models of several families, built from a config with random weights
and a fixed seed (no download), and a ragged workload for the engine."""

from __future__ import annotations

import random
from typing import Dict, List

import torch

FAMILIES = ("llama", "qwen2", "gemma2", "gpt_oss", "deepseek_v3", "deepseek_v3_small")

# head_dim 64: the smallest head size every GPU plugin serves
_COMMON = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64,
               max_position_embeddings=512, tie_word_embeddings=False)


def make_config(family: str):
    import transformers as tf

    if family == "llama":
        return tf.LlamaConfig(**_COMMON, architectures=["LlamaForCausalLM"])
    if family == "qwen2":
        return tf.Qwen2Config(**_COMMON, use_sliding_window=False,
                              architectures=["Qwen2ForCausalLM"])
    if family == "gemma2":
        # windows of 8 under prompts of up to 70 tokens; a soft-cap low enough
        # to bite (5; Gemma-2 ships 50); a
        # query_pre_attn_scalar that is not head_dim, so the scale matters
        c = dict(_COMMON, num_hidden_layers=4)
        return tf.Gemma2Config(**c, sliding_window=8, query_pre_attn_scalar=24,
                               attn_logit_softcapping=5.0, final_logit_softcapping=30.0,
                               layer_types=["sliding_attention", "full_attention"] * 2,
                               architectures=["Gemma2ForCausalLM"])
    if family == "gpt_oss":
        c = dict(_COMMON, num_hidden_layers=4, intermediate_size=128)
        return tf.GptOssConfig(**c, sliding_window=8, num_local_experts=4,
                               num_experts_per_tok=2,
                               rope_parameters=dict(rope_type="yarn", factor=32.0, beta_fast=32.0,
                                                    beta_slow=1.0, truncate=False,
                                                    original_max_position_embeddings=16),
                               layer_types=["sliding_attention", "full_attention"] * 2,
                               architectures=["GptOssForCausalLM"])
    if family.startswith("deepseek_v3"):
        return _deepseek_v3(tf, small=family == "deepseek_v3_small")
    raise ValueError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")


def _deepseek_v3(tf, small: bool):
    """DeepSeek-style MLA, which attnhost serves absorbed: one KV head of
    kv_lora_rank + qk_rope_head_dim channels, V its first kv_lora_rank.
    deepseek_v3 has DeepSeek's own 512 + 64 (= 576, v 512: what the GPU MLA
    kernels serve), the q LoRA path, interleaved rotary and a YaRN mscale in
    the scale; deepseek_v3_small has 64 + 32 (= 96, v 64: cpu_amx serves
    it), no q LoRA (as DeepSeek-V2-Lite) and plain rotary. qk_nope_head_dim,
    v_head_dim and the rank all differ, so a mixed-up W_UK/W_UV split
    fails. One dense layer, then a tiny MoE (4 experts, 2 per token, one
    shared)."""
    c = dict(_COMMON, num_hidden_layers=3, num_key_value_heads=4)
    del c["head_dim"]
    moe = dict(first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2,
               n_shared_experts=1, moe_intermediate_size=64, n_group=1, topk_group=1)
    if small:
        mla = dict(kv_lora_rank=64, q_lora_rank=None, qk_rope_head_dim=32, rope_interleave=False,
                   rope_parameters=dict(rope_type="default", rope_theta=10000.0))
    else:
        mla = dict(kv_lora_rank=512, q_lora_rank=96, qk_rope_head_dim=64, rope_interleave=True,
                   rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                        mscale=1.0, mscale_all_dim=1.0, beta_fast=32.0,
                                        beta_slow=1.0, original_max_position_embeddings=128))
    return tf.DeepseekV3Config(**c, **moe, **mla, qk_nope_head_dim=48, v_head_dim=40,
                               architectures=["DeepseekV3ForCausalLM"])


def build_model(family: str, dtype: str = "fp32", device: str = "cpu", seed: int = 0):
    from transformers import AutoModelForCausalLM

    cfg = make_config(family)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    # random weights bigger than the init's 0.02 so logits are not all ties
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1]) ** 0.5)
            elif "sinks" in name:
                p.copy_(torch.randn(p.shape, generator=g))
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return model.to(device=device, dtype=tdt).eval()


def workload(vocab: int, seed: int = 0, new_tokens: int = 17) -> Dict[int, List[tuple]]:
    """Arrivals per step: (prompt, max_new_tokens). Prompts of 5 to 70
    tokens (70 > the engine's 64-token step: chunked prefill), later
    arrivals joining running decodes, different lengths so requests finish
    at different steps and their blocks are reused."""
    rng = random.Random(seed)

    def p(n):
        return [rng.randrange(vocab) for _ in range(n)]

    return {0: [(p(5), new_tokens), (p(23), new_tokens + 3), (p(70), new_tokens)],
            3: [(p(12), new_tokens + 1), (p(40), new_tokens)],
            9: [(p(3), new_tokens + 2), (p(33), new_tokens)]}
