"""Models without INI text: from_specs through ah_model_create, layer kinds,
and Model.from_hf_config on a dict and on a path."""

import json
import os
from pathlib import Path

import pytest

import attnhost

CONFIGS = Path(os.environ.get("ATTNHOST_SOURCE_DIR", Path(__file__).resolve().parents[2])) / "tests/data/hf_configs"


def _needs_importer():
    if not attnhost._ffi.load().ah_model_import_available():
        pytest.skip("libattnhost was built without json-c")


def test_from_specs_kinds_and_errors():
    L = attnhost.LayerSpec
    m = attnhost.Model.from_specs("hy", [L(kind="mamba"), L(num_q_heads=8, num_kv_heads=2, head_size=64),
                                         L(kind="gdn"), L(mla=True, num_q_heads=16, kv_lora_rank=256)])
    assert [m.layer_kind(i) for i in range(4)] == ["mamba", "attention", "gdn", "attention"]
    assert m.layer(0).kind == "mamba" and m.layer(1).num_kv_heads == 2
    assert (m.layer(3).qk_head_size, m.layer(3).v_head_size, m.layer(3).num_kv_heads) == (320, 256, 1)
    back = attnhost.Model.from_text(m.to_ini())
    assert [back.layer(i) for i in range(4)] == [m.layer(i) for i in range(4)]
    with pytest.raises(attnhost.ConfigError, match="layer 0: num_q_heads 8 is not a multiple of num_kv_heads 3"):
        attnhost.Model.from_specs("bad", [L(num_q_heads=8, num_kv_heads=3, head_size=64)])
    with pytest.raises(ValueError, match="kind"):
        attnhost.Model.from_specs("bad", [L(kind="conv")])


def test_from_hf_config_path_and_dict():
    _needs_importer()
    m = attnhost.Model.from_hf_config(CONFIGS / "gemma-2-9b.json")
    assert m.num_layers == 42
    l0, l1 = m.layer(0), m.layer(1)
    assert (l0.sliding_window, l1.sliding_window) == (4096, 0)
    assert l0.softcap == 50.0 and abs(l0.scale - 0.0625) < 1e-9 and l0.dtype == "fp32"
    cfg = json.loads((CONFIGS / "llama-3-70b.json").read_text())
    m = attnhost.Model.from_hf_config(cfg, tensor_parallel=8, dtype="fp16", name="l70-tp8")
    assert m.name == "l70-tp8" and m.num_layers == 80
    assert (m.layer(0).num_q_heads, m.layer(0).num_kv_heads, m.layer(0).dtype) == (8, 1, "fp16")
    assert "num_kv_heads = 1" in m.text
    j = attnhost.Model.from_hf_config(CONFIGS / "jamba-v0.1.json")
    assert [j.layer_kind(i) for i in range(8)] == ["mamba"] * 4 + ["attention"] + ["mamba"] * 3


def test_from_hf_config_kv_groups():
    _needs_importer()
    one = attnhost.Model.from_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert one.num_kv_groups == 1 and {l.kv_group for l in one.layers()} == {0}
    m = attnhost.Model.from_hf_config(CONFIGS / "gpt-oss-120b.json", kv_groups="hybrid")
    assert m.num_kv_groups == 2
    assert [(l.sliding_window, l.kv_group) for l in list(m.layers())[:4]] == [(128, 0), (0, 1)] * 2
    assert "kv_group = 1" in m.text
    back = attnhost.Model.from_specs("back", list(m.layers()))
    assert back.num_kv_groups == 2 and back.layer(3).kv_group == 1
    with pytest.raises(ValueError, match="kv_groups"):
        attnhost.Model.from_hf_config(CONFIGS / "gpt-oss-120b.json", kv_groups="two")


def test_from_hf_config_refusals():
    _needs_importer()
    with pytest.raises(attnhost.ConfigError, match='model_type = "rwkv"'):
        attnhost.Model.from_hf_config({"model_type": "rwkv"})
    with pytest.raises(attnhost.ConfigError, match="num_attention_heads = 32 is not a multiple of "
                                                   "num_key_value_heads = 6"):
        attnhost.Model.from_hf_config({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
                                       "num_attention_heads": 32, "num_key_value_heads": 6})
    with pytest.raises(ValueError, match="dtype"):
        attnhost.Model.from_hf_config({"model_type": "llama"}, dtype="fp8_e4m3")


def test_selection_of_kinds(host, cpu_amx):
    L = attnhost.LayerSpec
    m = attnhost.Model.from_specs("hy", [L(kind="mamba"), L(num_q_heads=4, head_size=32, dtype="fp32")])
    sel = host.select(m)
    d = sel.decision(0)
    assert d.plugin is None and d.kind == "mamba" and d.list_source == "mamba layer: not attention"
    assert sel.decision(1).plugin == "cpu_amx" and sel.decision(1).kind == "attention"


def test_block_size_auto(host, cpu_amx):
    """block_size = "auto" from specs and from an import: the model keeps
    "auto", and a binding resolves it to the prefill winner's preferred
    size (cpu_amx: 16)."""
    L = attnhost.LayerSpec
    m = attnhost.Model.from_specs("a", [L(num_q_heads=4, num_kv_heads=2, head_size=64,
                                          dtype="fp32", block_size="auto")])
    assert m.layer(0).block_size == "auto" and "block_size = auto" in m.to_ini()
    d = host.select(m, force=cpu_amx.name).decision(0)
    assert d.spec.block_size == 16
    with pytest.raises(ValueError, match="block_size = 'big'"):
        attnhost.Model.from_specs("bad", [L(num_q_heads=4, head_size=64, block_size="big")])
    _needs_importer()
    q = attnhost.Model.from_hf_config(CONFIGS / "qwen2.5-7b.json", block_size="auto")
    assert q.layer(0).block_size == "auto" and "block_size = auto" in q.text
