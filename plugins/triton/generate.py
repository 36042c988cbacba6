#!/usr/bin/env python3
"""Ahead-of-time build of the triton plugin's kernels.

Compiles every specialization the plugin's caps claim, for each target, with
Triton's compiler and no GPU present, and writes into artifacts/:
  <arch>/<kernel>_<q>_<kv>_h<pad>.cubin|.hsaco   the binaries
  kernel_table_{cuda,hip}.c  entries: kernel, arch, dtypes, head pad, tile
                   sizes, num_warps, shared memory, parameter signature, image
  kernels_{cuda,hip}.S  .incbin of the binaries (embedded into triton.so
                   and triton_hip.so respectively)
  MANIFEST         Triton version, sha256 of the kernel sources, sha256 of
                   every artifact; check_artifacts.sh verifies it in CI

Usage: python3 generate.py [--targets sm80,sm90,gfx90a,gfx942] [--jobs N]
(the default builds all four; the AMD targets compile without an AMD device)
Needs: pip install triton==3.6.0 (the version the MANIFEST records).
"""
import argparse
import concurrent.futures as cf
import hashlib
import inspect
import os
import sys

# Line info would embed the PTX text in every cubin and triple its size.
os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
KDIR = os.path.join(HERE, "kernels")
ADIR = os.path.join(HERE, "artifacts")
sys.path.insert(0, KDIR)

# ah_dtype values (plugin.h) and the Triton pointer types they travel as.
AH_DTYPE = {"fp16": 2, "bf16": 3, "fp8_e4m3": 4, "fp8_e5m2": 5}
TT_TYPE = {"fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "fp8e4nv", "fp8_e5m2": "fp8e5"}

# Targets: name -> (backend, arch, warp size, whether FP8 KV is compiled).
TARGETS = {
    "sm80": ("cuda", 80, 32, False),  # Ampere/Ada; Triton's FP8 conversions need sm_89+
    "sm90": ("cuda", 90, 32, True),
    "gfx90a": ("hip", "gfx90a", 64, False),
    "gfx942": ("hip", "gfx942", 64, False),
}

HEAD_PADS = (64, 128, 256)
MAX_SPLITS = 64  # decode_split_reduce's padded split count; num_kv_splits <= this

# Launch shapes per target family and head pad: (BLOCK_M, TILE_N, num_warps,
# num_stages). sm80 also serves sm_86/sm_89, whose blocks get at most 99 KB
# of shared memory; Hopper gets 227 KB.
UNIFIED_CFG = {
    "sm80": {64: (128, 64, 4, 2), 128: (128, 64, 8, 2), 256: (32, 32, 4, 2)},
    "sm90": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 32, 8, 2)},
    "amd": {64: (64, 64, 4, 2), 128: (64, 32, 4, 2), 256: (32, 32, 4, 1)},  # LDS: 64 KB a block
}
# The PLAIN unified kernel (no soft-cap, no ALiBi, power-of-two pages: what
# the launcher runs whenever the layer allows) for the CUDA targets; AMD runs
# the general kernel for every layer.
# With the page ids read a tile ahead the pipeliner prefetches K/V again;
# sm80 takes 3 stages (two K/V buffers, 96 KB at head 128: inside the 99 KB
# of sm_86/89).
PLAIN_CFG = {
    "sm80": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (32, 32, 4, 3)},
    "sm90": UNIFIED_CFG["sm90"],
}
# The tree-mask kernel (the general one plus the mask's bytes, which the
# pipeliner buffers too): the general kernel's shapes, but for sm80 at pad
# 128, where 128/64/8/2 needs 128 KB (past sm_86/89's 99 KB); 128/32/8/2
# takes 80 KB. Not measured.
MASK_CFG = {
    "sm80": {64: UNIFIED_CFG["sm80"][64], 128: (128, 32, 8, 2), 256: UNIFIED_CFG["sm80"][256]},
    "sm90": UNIFIED_CFG["sm90"],
    "amd": UNIFIED_CFG["amd"],
}
# The ragged kernel (AH_FEAT_RAGGED_KV), per query/key pad: (QK_A, QK_B,
# V_PAD). Pad 192 is MLA's non-absorbed prefill, qk 192 (128 + 64, two
# dots) with v 128; the others serve equal head sizes (and any smaller v).
RAGGED_PADS = {64: (64, 0, 64), 128: (128, 0, 128), 192: (128, 64, 128), 256: (256, 0, 256)}
# Its launch shapes, (BLOCK_M, TILE_N, num_warps, num_stages): the PLAIN
# specialization (no soft-cap, no ALiBi: MLA's layers; CUDA targets) as the
# unified plain kernel where the pads match, pad 192 with three stages on
# sm_90 (168 KB) and two on sm80 (72 KB); the general one (soft-cap
# branch: two copies of the key loops, whose buffers do not share shared
# memory) with two stages where three would not fit.
RAGGED_PLAIN_CFG = {
    "sm80": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 192: (64, 64, 4, 2), 256: (32, 32, 4, 3)},
    "sm90": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 192: (128, 64, 8, 3), 256: (64, 32, 8, 2)},
}
RAGGED_CFG = {
    "sm80": {64: (128, 64, 4, 2), 128: (128, 64, 8, 2), 192: (64, 32, 4, 2), 256: (32, 32, 4, 2)},
    "sm90": {64: (128, 64, 4, 3), 128: (128, 64, 8, 2), 192: (128, 64, 8, 2), 256: (64, 32, 8, 2)},
    "amd": {64: (64, 64, 4, 2), 128: (64, 32, 4, 2), 192: (64, 32, 4, 2), 256: (32, 32, 4, 1)},
}
# Decode stage 1: (BLOCK_H, TILE_N, num_warps, num_stages).
DECODE_CFG = {
    "sm80": {64: (16, 64, 4, 2), 128: (16, 64, 4, 2), 256: (16, 32, 4, 2)},
    "sm90": {64: (16, 64, 4, 3), 128: (16, 64, 4, 3), 256: (16, 32, 4, 3)},
    "amd": {64: (16, 64, 4, 2), 128: (16, 32, 4, 2), 256: (16, 16, 4, 2)},
}

# Parameter lists, in kernel order: (name, type, divisible_by_16). Types:
# Q/KV/O: pointer of the query/cache/output dtype, p32/i32ptr/i64ptr: float,
# int32, int64 pointers; f32, i32 scalars. The C launcher packs arguments in
# this order and checks the signature string at load time.
P_UNIFIED = [
    ("q_ptr", "Q", 1), ("k_cache", "KV", 1), ("v_cache", "KV", 1), ("out_ptr", "Q", 1),
    ("lse_ptr", "f32ptr", 1), ("sinks_ptr", "f32ptr", 1), ("alibi_ptr", "f32ptr", 1),
    ("block_table", "i32ptr", 1), ("seq_lens", "i32ptr", 1), ("query_start_loc", "i32ptr", 1),
    ("counts", "i32ptr", 1),
    ("scale", "f32", 0), ("softcap", "f32", 0), ("out_scale", "f32", 0),
    ("group_size", "i32", 0), ("heads", "i32", 0), ("head_dim", "i32", 1), ("bt_stride", "i32", 0),
    ("stride_qt", "i32", 1), ("stride_qh", "i32", 1), ("stride_ot", "i32", 1),
    ("stride_oh", "i32", 1), ("num_q_heads", "i32", 0),
    ("stride_kb", "i32", 1), ("stride_ks", "i32", 1), ("stride_kh", "i32", 1),
    ("stride_vb", "i32", 1), ("stride_vs", "i32", 1), ("stride_vh", "i32", 1),
    ("block_size", "i32", 0), ("window", "i32", 0), ("causal", "i32", 0),
    ("use_softcap", "i32", 0), ("use_alibi", "i32", 0), ("use_sinks", "i32", 0),
    ("store_lse", "i32", 0),
]
P_STAGE1 = [
    ("q_ptr", "Q", 1), ("k_cache", "KV", 1), ("v_cache", "KV", 1), ("mid_o", "f32ptr", 1),
    ("mid_lse", "f32ptr", 1), ("alibi_ptr", "f32ptr", 1),
    ("block_table", "i32ptr", 1), ("seq_lens", "i32ptr", 1), ("counts", "i32ptr", 1),
    ("scale", "f32", 0), ("softcap", "f32", 0),
    ("group_size", "i32", 0), ("head_dim", "i32", 1), ("bt_stride", "i32", 0),
    ("stride_qt", "i32", 1), ("stride_qh", "i32", 1),
    ("stride_kb", "i32", 1), ("stride_ks", "i32", 1), ("stride_kh", "i32", 1),
    ("stride_vb", "i32", 1), ("stride_vs", "i32", 1), ("stride_vh", "i32", 1),
    ("block_size", "i32", 0), ("window", "i32", 0), ("num_splits", "i32", 0),
    ("split_tile", "i32", 0), ("split_stride", "i32", 0), ("num_q_heads", "i32", 0),
    ("use_softcap", "i32", 0), ("use_alibi", "i32", 0),
]
P_REDUCE = [
    ("mid_o", "f32ptr", 1), ("mid_lse", "f32ptr", 1), ("out_ptr", "Q", 1), ("lse_ptr", "f32ptr", 1),
    ("sinks_ptr", "f32ptr", 1), ("counts", "i32ptr", 1),
    ("out_scale", "f32", 0), ("head_dim", "i32", 1), ("num_splits", "i32", 0),
    ("split_stride", "i32", 0), ("stride_ot", "i32", 1), ("stride_oh", "i32", 1),
    ("num_q_heads", "i32", 0), ("use_sinks", "i32", 0), ("store_lse", "i32", 0),
]
# The LSE pointers carry no 16-byte hint: the host merges ranks' slices of an
# all-gathered buffer, which start at k * T * H floats (one load per program,
# so the hint would buy nothing).
P_MERGE = [
    ("va_ptr", "Q", 1), ("la_ptr", "f32ptr", 0), ("vb_ptr", "Q", 1), ("lb_ptr", "f32ptr", 0),
    ("out_ptr", "Q", 1), ("lse_out_ptr", "f32ptr", 0),
    ("num_heads", "i32", 0), ("head_dim", "i32", 1), ("stride_at", "i32", 1), ("stride_ah", "i32", 1),
    ("stride_bt", "i32", 1), ("stride_bh", "i32", 1), ("stride_ot", "i32", 1),
    ("stride_oh", "i32", 1), ("store_lse", "i32", 0),
]
P_KVWRITE = [
    ("key_ptr", "Q", 1), ("value_ptr", "Q", 1), ("k_cache", "KV", 1), ("v_cache", "KV", 1),
    ("slot_mapping", "i64ptr", 1), ("counts", "i32ptr", 1),
    ("k_scale", "f32", 0), ("v_scale", "f32", 0), ("head_dim", "i32", 1),
    ("block_size", "i32", 0),
    ("stride_kt", "i32", 1), ("stride_kh", "i32", 1), ("stride_vt", "i32", 1), ("stride_vh", "i32", 1),
    ("stride_ckb", "i32", 1), ("stride_cks", "i32", 1), ("stride_ckh", "i32", 1),
    ("stride_cvb", "i32", 1), ("stride_cvs", "i32", 1), ("stride_cvh", "i32", 1),
]
P_RAGGED = [
    ("q_ptr", "Q", 1), ("k_ptr", "Q", 1), ("v_ptr", "Q", 1), ("out_ptr", "Q", 1),
    ("lse_ptr", "f32ptr", 1), ("sinks_ptr", "f32ptr", 1), ("alibi_ptr", "f32ptr", 1),
    ("cu_seqlens_k", "i32ptr", 1), ("query_start_loc", "i32ptr", 1), ("counts", "i32ptr", 1),
    ("scale", "f32", 0), ("softcap", "f32", 0),
    ("group_size", "i32", 0), ("heads", "i32", 0), ("qk_dim", "i32", 1), ("v_dim", "i32", 1),
    ("stride_qt", "i32", 1), ("stride_qh", "i32", 1), ("stride_ot", "i32", 1),
    ("stride_oh", "i32", 1), ("num_q_heads", "i32", 0),
    ("stride_kt", "i32", 1), ("stride_kh", "i32", 1), ("stride_vt", "i32", 1),
    ("stride_vh", "i32", 1),
    ("window", "i32", 0), ("causal", "i32", 0), ("context_keys", "i32", 0),
    ("use_softcap", "i32", 0), ("use_alibi", "i32", 0), ("use_sinks", "i32", 0),
    ("store_lse", "i32", 0),
]
# Parameters only some specializations take (kernel order, appended to the
# list above where taken). A specialization without them compiles each as a
# constexpr of its default in the kernel's definition (None, False), so the
# binaries of the kernels without the feature keep their parameter list and
# their bytes.
P_TREE_MASK = [("mask_meta", "i64ptr", 1)]
# FP8 scales in float32 tensors (kv_scales tensor or per_head), 4-byte
# aligned; scale_stride 1 per head, 0 per tensor.
P_SCALES = [("k_scale_ptr", "f32ptr", 0), ("v_scale_ptr", "f32ptr", 0), ("scale_stride", "i32", 0)]
SCALES_SUFFIX = "_scale_tensors"
SIG_CHAR = {"Q": "p", "KV": "p", "f32ptr": "p", "i32ptr": "p", "i64ptr": "p", "f32": "f", "i32": "i"}


def source_files():
    files = sorted(f for f in os.listdir(KDIR) if f.endswith(".py"))
    return [os.path.join("kernels", f) for f in files] + ["generate.py"]


def sources_hash():
    """sha256 over the kernel sources and this script, each as
    '<relative path>\\0<bytes>\\0', in sorted order: what check_artifacts.sh
    recomputes with sha256sum."""
    h = hashlib.sha256()
    for rel in source_files():
        h.update(rel.encode() + b"\0")
        with open(os.path.join(HERE, rel), "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def specializations(target):
    """(kernel, q, kv, head_pad, constexprs, params, warps, stages, block_m, tile_n, v_pad):
    head_pad bounds the query/key head size, v_pad the value head size
    (the same but for the ragged kernel's pad 192)."""
    fp8 = TARGETS[target][3]
    fam = target if target in UNIFIED_CFG else "amd"
    out = []
    for q in ("fp16", "bf16"):
        kvs = [q] + (["fp8_e4m3", "fp8_e5m2"] if fp8 else [])
        for pad in HEAD_PADS:
            bm, tn, w, st = UNIFIED_CFG[fam][pad]
            hb, dtn, dw, dst = DECODE_CFG[fam][pad]
            for kv in kvs:
                out.append(("unified_attention", q, kv, pad,
                            {"HEAD_PAD": pad, "BLOCK_M": bm, "TILE_N": tn, "PLAIN": False},
                            P_UNIFIED, w, st, bm, tn))
                # Speculative tree verification (a batch with a tree mask):
                # the general kernel's loop and parameters plus the mask's.
                mbm, mtn, mw, mst = MASK_CFG[fam][pad]
                out.append(("unified_mask", q, kv, pad,
                            {"HEAD_PAD": pad, "BLOCK_M": mbm, "TILE_N": mtn, "PLAIN": False,
                             "TREE_MASK": True},
                            P_UNIFIED + P_TREE_MASK, mw, mst, mbm, mtn))
                if target in PLAIN_CFG:
                    pbm, ptn, pw, pst = PLAIN_CFG[target][pad]
                    out.append(("unified_plain", q, kv, pad,
                                {"HEAD_PAD": pad, "BLOCK_M": pbm, "TILE_N": ptn, "PLAIN": True},
                                P_UNIFIED, pw, pst, pbm, ptn))
                out.append(("decode_split_stage1", q, kv, pad,
                            {"HEAD_PAD": pad, "BLOCK_H": hb, "TILE_N": dtn}, P_STAGE1, dw, dst, hb, dtn))
            out.append(("decode_split_reduce", q, q, pad,
                        {"HEAD_PAD": pad, "MAX_SPLITS": MAX_SPLITS}, P_REDUCE, 4, 1, MAX_SPLITS, 0))
            out.append(("merge_states", q, q, pad, {"HEAD_PAD": pad}, P_MERGE, 4, 1, 0, 0))
        for kv in kvs:
            # One head pad (256, masked to head_dim) serves every head size.
            out.append(("kv_write", q, kv, 256, {"HEAD_PAD": 256, "IS_FP8": kv.startswith("fp8")},
                        P_KVWRITE, 4, 1, 0, 0))
        for pad, (qa, qb, vp) in RAGGED_PADS.items():
            pads = {"QK_A": qa, "QK_B": qb, "V_PAD": vp}
            bm, tn, w, st = RAGGED_CFG[fam][pad]
            out.append(("ragged_attention", q, q, pad,
                        dict(pads, BLOCK_M=bm, TILE_N=tn, PLAIN=False), P_RAGGED, w, st, bm, tn, vp))
            if target in RAGGED_PLAIN_CFG:
                bm, tn, w, st = RAGGED_PLAIN_CFG[target][pad]
                out.append(("ragged_plain", q, q, pad,
                            dict(pads, BLOCK_M=bm, TILE_N=tn, PLAIN=True), P_RAGGED, w, st, bm, tn,
                            vp))
    # FP8 caches with their scales in tensors: the kernels that read the
    # cache (unified in every specialization, stage 1) and kv_write, again
    # with the scale pointers (the reduction and merge take none).
    scaled = [o[:4] + (dict(o[4], SCALE_TENSORS=True), o[5] + P_SCALES) + o[6:]
              for o in out if o[2].startswith("fp8") and
              o[0] in ("unified_attention", "unified_plain", "unified_mask",
                       "decode_split_stage1", "kv_write")]
    out += [(o[0] + SCALES_SUFFIX,) + o[1:] for o in scaled]
    return [o if len(o) == 11 else o + (o[3],) for o in out]


def kernel_fn(name):
    if name.endswith(SCALES_SUFFIX):
        name = name[:-len(SCALES_SUFFIX)]
    import decode_split
    import kv_write
    import merge_states
    import ragged_attention
    import unified_attention
    if name in ("unified_plain", "unified_mask"):
        return unified_attention.unified_attention
    if name == "ragged_plain":
        return ragged_attention.ragged_attention
    return {"unified_attention": unified_attention.unified_attention,
            "decode_split_stage1": decode_split.decode_split_stage1,
            "decode_split_reduce": decode_split.decode_split_reduce,
            "merge_states": merge_states.merge_states,
            "ragged_attention": ragged_attention.ragged_attention,
            "kv_write": kv_write.kv_write}[name]


def compile_one(target, spec):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    kname, q, kv, pad, consts, params, warps, stages, bm, tn, vpad = spec
    backend, arch, warp, _ = TARGETS[target]
    fn = kernel_fn(kname)
    sig, attrs = {}, {}
    type_of = {"Q": "*" + TT_TYPE[q], "KV": "*" + TT_TYPE[kv], "f32ptr": "*fp32",
               "i32ptr": "*i32", "i64ptr": "*i64", "f32": "fp32", "i32": "i32"}
    # Every argument in the kernel's order: a parameter of the list, a
    # constexpr the specialization sets, or one it leaves at its default.
    defaults = {n: p.default for n, p in inspect.signature(fn.fn).parameters.items()
                if p.default is not inspect.Parameter.empty}
    consts = dict(consts)
    given = {p[0]: p for p in params}
    for i, pname in enumerate(fn.arg_names):
        if pname in given and pname not in consts:
            _, ptype, div16 = given[pname]
            sig[pname] = type_of[ptype]
            if div16:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            assert pname in consts or pname in defaults, (kname, pname)
            consts.setdefault(pname, defaults.get(pname))
            sig[pname] = "constexpr"
    runtime = [n for n in fn.arg_names if sig[n] != "constexpr"]
    assert runtime == [p[0] for p in params], (kname, runtime, [p[0] for p in params])
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    tgt = GPUTarget(backend, arch, warp)
    opts = make_backend(tgt).parse_options({"num_warps": warps, "num_stages": stages})
    ck = triton.compile(src, target=tgt, options=opts.__dict__)
    md = ck.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise RuntimeError(f"{kname}: needs scratch memory, which the C launcher does not provide")
    ext = "cubin" if backend == "cuda" else "hsaco"
    fname = f"{kname}_{q}_{kv}_h{pad}.{ext}"
    with open(os.path.join(ADIR, target, fname), "wb") as f:
        f.write(ck.asm[ext])
    sigstr = "".join(SIG_CHAR[p[1]] for p in params)
    return dict(kernel=kname, arch=target, q=q, kv=kv, pad=pad, vpad=vpad, bm=bm, tn=tn, warps=warps,
                shared=md.shared, sig=sigstr, file=f"{target}/{fname}", symbol=md.name)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_tables(entries, backend, hdr):
    """kernel_table_<backend>.c and kernels_<backend>.S: one plugin .so per
    backend embeds only its own binaries."""
    entries = [e for e in entries if TARGETS[e["arch"]][0] == backend]
    with open(os.path.join(ADIR, f"kernels_{backend}.S"), "w") as f:
        f.write(hdr + '\t.section .rodata.ah_triton_images,"a"\n')
        for i, e in enumerate(entries):
            f.write(f"\t.balign 16\n\t.globl ah_tk_img_{i}\n\t.hidden ah_tk_img_{i}\n"
                    f"ah_tk_img_{i}:\n\t.incbin \"{e['file']}\"\n"
                    f"\t.globl ah_tk_img_{i}_end\n\t.hidden ah_tk_img_{i}_end\nah_tk_img_{i}_end:\n")
        f.write('\t.section .note.GNU-stack,"",@progbits\n')
    with open(os.path.join(ADIR, f"kernel_table_{backend}.c"), "w") as f:
        f.write(hdr + '#include "kernel_table.h"\n\n')
        for i in range(len(entries)):
            f.write(f"extern const unsigned char ah_tk_img_{i}[], ah_tk_img_{i}_end[];\n")
        f.write(f'\nconst char ah_tk_triton_version[] = "{TVER[0]}";\n')
        f.write(f'const char ah_tk_sources_sha256[] = "{TVER[1]}";\n\n')
        f.write("const tk_entry ah_tk_table[] = {\n")
        for i, e in enumerate(entries):
            f.write(f'    {{"{e["kernel"]}", "{e["arch"]}", {AH_DTYPE[e["q"]]}, {AH_DTYPE[e["kv"]]}, '
                    f'{e["pad"]}, {e["vpad"]}, {e["bm"]}, {e["tn"]}, {e["warps"]}, {e["shared"]}, "{e["sig"]}", '
                    f'"{e["symbol"]}", ah_tk_img_{i}, ah_tk_img_{i}_end}},\n')
        if not entries:  # keep the array non-empty for C; the length says 0
            f.write('    {"", "", 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0, 0},\n')
        f.write("};\n")
        f.write(f"const unsigned ah_tk_table_len = {len(entries)};\n")
    return [f"kernel_table_{backend}.c", f"kernels_{backend}.S"]


TVER = ["", ""]


def write_outputs(entries, tver, shash):
    entries.sort(key=lambda e: (e["arch"], e["kernel"], e["q"], e["kv"], e["pad"]))
    TVER[0], TVER[1] = tver, shash
    hdr = ("/* GENERATED by plugins/triton/generate.py from the sources in kernels/; do not edit.\n"
           f" * Triton {tver}, kernel sources sha256 {shash}. */\n")
    tables = write_tables(entries, "cuda", hdr) + write_tables(entries, "hip", hdr)
    with open(os.path.join(ADIR, "MANIFEST"), "w") as f:
        f.write(f"triton {tver}\nsources {shash}\n")
        for rel in tables + [e["file"] for e in entries]:
            f.write(f"artifact {sha256_file(os.path.join(ADIR, rel))} {rel}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="sm80,sm90,gfx90a,gfx942")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    import triton
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in TARGETS:
            sys.exit(f"unknown target {t}; known: {', '.join(TARGETS)}")
    for t in TARGETS:  # stale binaries of a target no longer generated must go
        d = os.path.join(ADIR, t)
        if os.path.isdir(d):
            for f in os.listdir(d):
                os.remove(os.path.join(d, f))
            os.rmdir(d)
    for t in targets:
        os.makedirs(os.path.join(ADIR, t))
    jobs = [(t, s) for t in targets for s in specializations(t)]
    entries = []
    with cf.ProcessPoolExecutor(max_workers=args.jobs) as ex:
        futs = [ex.submit(compile_one, t, s) for t, s in jobs]
        for fu in cf.as_completed(futs):
            e = fu.result()
            entries.append(e)
            print(f"{e['file']}: warps {e['warps']} shared {e['shared']}", flush=True)
    write_outputs(entries, triton.__version__, sources_hash())
    total = sum(os.path.getsize(os.path.join(ADIR, e["file"])) for e in entries)
    print(f"{len(entries)} kernels, {total / 1e6:.2f} MB of binaries")


if __name__ == "__main__":
    main()
