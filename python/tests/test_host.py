"""Host, versions, plugins, models and selections (no NumPy needed)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnhost
from conftest import fp32_spec

PKG = str(Path(__file__).resolve().parents[1])


def test_versions():
    assert attnhost.version() == attnhost.Host.version()
    assert attnhost.abi_version()[0] == attnhost.ABI_MAJOR == 2


def test_plugins(host, cpu_amx):
    names = [p.name for p in host.plugins()]
    assert "cpu_amx" in names
    assert cpu_amx.state == "available" and cpu_amx.reason == ""
    assert cpu_amx.device_kind == "cpu"
    assert cpu_amx.version
    assert cpu_amx.probe is not None and cpu_amx.probe.usable
    assert "fp32" in cpu_amx.caps["q_dtypes"]
    assert host.plugin("no_such_plugin") is None
    assert host.hw_facts()["cpu_logical_cores"] >= 1
    assert "[select]" in host.config_dump()


def test_bad_config_names_key():
    with pytest.raises(attnhost.ConfigError) as e:
        attnhost.Host(config_text="[select]\nfallback = maybe\n", cache_path="")
    assert e.value.status == attnhost.Status.CONFIG
    assert "fallback" in e.value.message and "maybe" in e.value.message


def test_model_from_specs_round_trip():
    specs = [fp32_spec(), fp32_spec(), fp32_spec(sliding_window=8, kv_layout="hnd"),
             attnhost.LayerSpec(mla=True, num_q_heads=16, dtype="bf16")]
    m = attnhost.Model.from_specs("mixed", specs)
    assert m.name == "mixed" and m.num_layers == 4
    # text: the model as a description (ah_model_to_ini), which parses back to it
    assert "[layers.2]" in m.text and "[layers.3]" in m.text
    back = attnhost.Model.from_text(m.text)
    assert [back.layer(i) for i in range(4)] == [m.layer(i) for i in range(4)]
    l0, l2, l3 = m.layer(0), m.layer(2), m.layer(3)
    assert (l0.num_q_heads, l0.num_kv_heads, l0.qk_head_size, l0.dtype) == (4, 2, 32, "fp32")
    assert (l2.sliding_window, l2.kv_layout) == (8, "hnd")
    assert l3.mla and (l3.qk_head_size, l3.v_head_size, l3.num_kv_heads) == (576, 512, 1)
    with pytest.raises(IndexError):
        m.layer(4)


def test_model_errors(tmp_path):
    with pytest.raises(attnhost.ConfigError) as e:
        attnhost.Model.from_text("[model]\nname = x\nnum_layers = 2\nnum_q_heads = 0\n")
    assert "num_q_heads" in str(e.value)
    with pytest.raises(attnhost.AttnhostError):
        attnhost.Model.from_ini(tmp_path / "missing.ini")
    p = tmp_path / "m.ini"
    p.write_text("[model]\nname = f\nnum_layers = 1\nnum_q_heads = 8\nhead_size = 64\n")
    assert attnhost.Model.from_ini(p).layer(0).head_size == 64
    with pytest.raises(ValueError, match="dtype"):
        attnhost.Model.from_specs("x", [fp32_spec(dtype="fp64")])


def test_selection_and_explain(host, cpu_amx):
    m = attnhost.Model.from_specs("sel", [fp32_spec(), fp32_spec(head_size=48)])
    sel = host.select(m)
    assert sel.num_layers == 2
    d = sel.decision(0, "decode")
    assert d.plugin == "cpu_amx" and d.phase == "decode" and not d.fallback
    assert d.spec.kv_layout in ("nhd", "hnd") and d.spec.kv_dtype == "fp32"
    assert any(c.chosen and c.plugin == "cpu_amx" for c in d.candidates)
    assert sel.plugins("prefill") == ["cpu_amx", "cpu_amx"]
    level, layer = sel.graph_level
    assert level in ("NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH", "ALWAYS")
    assert sel.mixed_steps == ("whole", 0, -1.0, -1.0)  # one winner per layer
    assert sel.warnings == []
    text = sel.explain()
    assert "model sel: 2 layers" in text and "layer 1 decode: cpu_amx" in text
    assert "-> cpu_amx" in text


def test_selection_reasons(host, cpu_amx):
    # head size 40 is outside cpu_amx's 32..256 step 16: forcing it fails
    # with a reason naming the field and the value
    m = attnhost.Model.from_specs("bad", [fp32_spec(head_size=40)])
    with pytest.raises(attnhost.AttnhostError) as e:
        host.select(m, force="cpu_amx")
    assert "head_size" in e.value.message and "40" in e.value.message


def test_fp8_scale_specs(host, cpu_amx):
    # the ABI 2.3 scale forms travel through a model, its text and a
    # selection; cpu_amx claims them
    fp8 = dict(kv_dtype="fp8_e4m3", fp8_attention=True)
    m = attnhost.Model.from_specs("scales", [fp32_spec(**fp8, kv_scales="per_head", q_scale=True),
                                             fp32_spec(**fp8, kv_scales="tensor")])
    assert "kv_scales = per_head" in m.text and "q_scale = true" in m.text
    l0, l1 = m.layer(0), m.layer(1)
    assert (l0.kv_scales, l0.q_scale, l1.kv_scales, l1.q_scale) == ("per_head", True, "tensor",
                                                                    False)
    assert attnhost.Model.from_text(m.text).layer(0) == l0
    d = host.select(m, force="cpu_amx").decision(0)
    assert d.plugin == "cpu_amx" and d.spec.kv_scales == "per_head" and d.spec.q_scale
    with pytest.raises(ValueError, match="kv_scales"):
        attnhost.Model.from_specs("x", [fp32_spec(**fp8, kv_scales="heads")])
    with pytest.raises(attnhost.ConfigError) as e:
        attnhost.Model.from_specs("x", [fp32_spec(kv_scales="tensor")])
    assert "kv_scales = tensor needs a KV cache in an FP8 kv_dtype" in e.value.message


def _run(code, env=None):
    import os

    e = dict(os.environ, PYTHONPATH=PKG)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)


def test_abi_major_mismatch_is_clear():
    r = _run("import attnhost, attnhost._ffi as f; f.ABI_MAJOR = 3\n"
             "try:\n    attnhost.Host()\nexcept attnhost.AbiMismatchError as e:\n"
             "    print('ABI', e.status.name, e)\n")
    assert r.returncode == 0, r.stderr
    assert "ABI ABI" in r.stdout and "written for ABI 3.x" in r.stdout


def test_not_libattnhost_is_clear():
    import ctypes.util

    libm = ctypes.util.find_library("m") or "libm.so.6"
    r = _run("import attnhost\ntry:\n    attnhost.version()\n"
             "except attnhost.AbiMismatchError as e:\n    print('caught', e)\n",
             {"ATTNHOST_LIB": libm})
    assert "caught" in r.stdout and "is not libattnhost" in r.stdout, r.stdout + r.stderr


def test_missing_library_is_clear():
    r = _run("import attnhost\ntry:\n    attnhost.version()\n"
             "except attnhost.LibraryNotFoundError as e:\n    print('caught', e)\n",
             {"ATTNHOST_LIB": "/nonexistent/libattnhost.so"})
    assert "caught" in r.stdout and "ATTNHOST_LIB" in r.stdout, r.stdout + r.stderr


def test_library_by_relative_path_finds_its_plugins():
    """The install's plugin directory and the scanner are found beside the
    library even when it was loaded by a relative path."""
    import attnhost._ffi as f

    lib = Path(f.load()._name).resolve()
    rel = os.path.relpath(lib, lib.parents[2])
    r = subprocess.run([sys.executable, "-c", "import attnhost\n"
                        "print(sorted((p.name, p.state) for p in attnhost.Host(cache_path='').plugins()))"],
                       env=dict(os.environ, PYTHONPATH=PKG, ATTNHOST_LIB=rel), cwd=lib.parents[2],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "('cpu_amx', 'available')" in r.stdout, r.stdout
