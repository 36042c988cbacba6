#!/usr/bin/env python3
"""Check a rocm_aiter code object without a GPU.

  check_code_object.py READELF OBJDUMP CODE_OBJECT ATTN_ARGS KV_ARGS MERGE_ARGS

From the AMDGPU metadata note (llvm-readelf --notes), for every kernel: no
VGPR or SGPR spills, private segment 0, LDS (group segment) <= 64 KiB,
wavefront 64, kernel-argument size equal to the host's parameter struct;
prints VGPR/AGPR/SGPR counts and the occupancy they allow (waves per SIMD
out of 8 from the unified 512-entry VGPR file of gfx90a/gfx942, granule 8). From the
disassembly (llvm-objdump -d): each attention kernel uses the MFMA its
tile loop is written for (the absorbed-MLA kernels, ra_decode_*_mla, the
decode kernel's 16x16x16), and every kernel the plugin launches is there.
FP8 kernels (names with _e4m3 / _e5m2, OCP, or _e4m3fnuz / _e5m2fnuz):
the attention kernels use the 16-bit MFMA of their query dtype and no FP8
instruction at all (every format is decoded in software, ra_layout.h, the
one path the CPU model test verifies: gfx942's FP8 converts and MFMAs read
only the fnuz formats and gfx90a has none); the writers divide by the scale with the correctly rounded
sequence (v_div_scale/v_div_fmas/v_div_fixup) and round with v_rndne, as
the oracle's float writer does.
"""
import re
import subprocess
import sys

readelf, objdump, obj = sys.argv[1:4]
arg_sizes = {"attn": int(sys.argv[4]), "kv": int(sys.argv[5]), "merge": int(sys.argv[6])}

notes = subprocess.run([readelf, "--notes", obj], check=True, capture_output=True, text=True).stdout
kernels, cur = [], None
for line in notes.splitlines():
    m = re.match(r"^  (- |  )\.(\w+):\s*(.*)$", line)
    if not m:
        continue
    if m.group(1) == "- ":
        cur = {}
        kernels.append(cur)
    if cur is not None:
        cur[m.group(2)] = m.group(3).strip()

fail = []
def need(cond, msg):
    if not cond:
        fail.append(msg)

names = {k.get("name") for k in kernels}
FP8 = ("_e4m3", "_e5m2", "_e4m3fnuz", "_e5m2fnuz")
expected = {"ra_write_kv", "ra_merge_bf16", "ra_merge_fp16"}
for dt in ("bf16", "fp16"):
    for kv in FP8:
        expected.add(f"ra_write_kv_{dt}{kv}")
    expected.add(f"ra_decode_reduce_{dt}_mla")
    for kv in ("",) + FP8:
        expected.add(f"ra_decode_{dt}{kv}_mla")  # absorbed MLA: decode kernel only
    for d in (64, 128, 256):
        expected.add(f"ra_decode_reduce_{dt}_d{d}")
        for kv in ("",) + FP8:
            for fam in ("decode", "prefill"):
                expected.add(f"ra_{fam}_{dt}{kv}_d{d}")
need(expected <= names, f"missing kernels: {sorted(expected - names)}")

print(f"{obj}: {len(kernels)} kernels")
print(f"{'kernel':28} {'vgpr':>5} {'agpr':>5} {'sgpr':>5} {'lds':>6} {'waves/SIMD':>10}")
for k in kernels:
    n = k["name"]
    iv = lambda key: int(k.get(key, "0"))
    need(iv("vgpr_spill_count") == 0, f"{n}: {iv('vgpr_spill_count')} VGPR spills")
    need(iv("sgpr_spill_count") == 0, f"{n}: {iv('sgpr_spill_count')} SGPR spills")
    need(iv("private_segment_fixed_size") == 0, f"{n}: private segment {iv('private_segment_fixed_size')}")
    need(iv("group_segment_fixed_size") <= 65536, f"{n}: LDS {iv('group_segment_fixed_size')} > 64 KiB")
    need(iv("wavefront_size") == 64, f"{n}: wavefront {iv('wavefront_size')}")
    need(k.get("uses_dynamic_stack", "false") == "false", f"{n}: dynamic stack")
    fam = "kv" if n.startswith("ra_write_kv") else "merge" if n.startswith("ra_merge") else "attn"
    need(iv("kernarg_segment_size") == arg_sizes[fam],
         f"{n}: kernel arguments {iv('kernarg_segment_size')} bytes, host struct {arg_sizes[fam]}")
    # gfx90a/gfx942: ArchVGPRs then AGPRs share one 512-entry file a lane;
    # the metadata's vgpr_count is that unified total, agpr_count its AGPRs.
    total = iv("vgpr_count")
    need(total <= 512 and total - iv("agpr_count") <= 256, f"{n}: {total} VGPRs ({iv('agpr_count')} AGPRs)")
    waves = min(8, 512 // max(8, -(-total // 8) * 8))
    print(f"{n:28} {iv('vgpr_count'):5} {iv('agpr_count'):5} {iv('sgpr_count'):5} "
          f"{iv('group_segment_fixed_size'):6} {waves:10}")

dis = subprocess.run([objdump, "-d", obj], check=True, capture_output=True, text=True).stdout
funcs, cur = {}, None
for line in dis.splitlines():
    m = re.match(r"^[0-9a-f]+ <([\w.]+)>:", line)
    if m:
        cur = m.group(1)
        funcs[cur] = []
    elif cur:
        funcs[cur].append(line)
mfma = {
    ("decode", "bf16"): r"v_mfma_f32_16x16x16_?bf16(_1k)?\b",
    ("decode", "fp16"): r"v_mfma_f32_16x16x16_?f16\b",
    ("prefill", "bf16"): r"v_mfma_f32_32x32x8_?bf16(_1k)?\b",
    ("prefill", "fp16"): r"v_mfma_f32_32x32x8_?f16\b",
}
fp8_insn = r"\bv_(cvt|mfma)\w*_(fp8|bf8)\w*"
for n in sorted(names):
    body = "\n".join(funcs.get(n, []))
    fp8 = any(kv in n for kv in FP8)
    if fp8:
        bad = re.search(fp8_insn, body)
        need(not bad, f"{n}: {bad.group(0) if bad else ''}: FP8 is decoded in software (ra_layout.h)")
    if n.startswith("ra_write_kv_"):
        for insn in ("v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32", "v_rndne_f32"):
            need(insn in body, f"{n}: no {insn}")
        continue
    m = re.match(r"ra_(decode|prefill)_(bf16|fp16)(_e4m3|_e5m2)?(fnuz)?_(d\d+|mla)$", n)
    if not m:
        continue
    hits = len(re.findall(mfma[(m.group(1), m.group(2))], body))
    need(hits > 0, f"{n}: no {mfma[(m.group(1), m.group(2))]} in the disassembly")
    first = re.search(r"v_mfma_\w+", body)
    print(f"{n:28} {hits:4} x {first.group(0) if first else '-'}")

if fail:
    print("FAIL:\n  " + "\n  ".join(fail))
    sys.exit(1)
print("all checks passed")
