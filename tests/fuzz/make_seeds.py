#!/usr/bin/env python3
"""Regenerate the binary seed corpora (record, recfile, hfconfig, batch, descriptor, scales) of
the fuzz targets; the batch seeds named abi21_* and abi22_* cover the ABI
2.1/2.2 fields (abi21_seeds), the scales seeds the ABI 2.3 FP8 scales
(scales_seeds). The text corpora (config, model) are copies of the example files
plus hand-written edge cases and are kept as they are.

Records follow the encoding documented at the top of core/src/record_codec.c;
if that format changes, update enc_record below and rerun:
    python3 tests/fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def s(x):
    if x is None:
        return u32(0xFFFFFFFF)
    b = x.encode()
    return u32(len(b)) + b


def int_set(values=(), lo=0, hi=0, step=0):
    return u32(len(values)) + b"".join(u32(v) for v in values) + u32(lo) + u32(hi) + u32(step)


def caps(q=0x2, kv=0x2, qk=int_set((), 1, 1024, 1), v=int_set((), 1, 1024, 1),
         blocks=int_set((), 1, 1024, 1), pref_block=16, features=0x200, attn=0x1, layouts=0x2,
         pref_layout=1, gfx=(), isa=0, graph=0, fill=1, fwk=0, caller_out=1, groups=0,
         keys=(("usable", "1", "doc"),)):
    out = u32(q) + u32(kv) + qk + v + blocks + u32(pref_block) + u32(features) + u32(attn)
    out += u32(layouts) + u32(pref_layout) + u32(0) + u32(0) + u32(len(gfx))
    out += b"".join(s(g) for g in gfx)
    out += u32(isa) + u32(graph) + u32(fill) + u32(fwk) + u32(caller_out) + u32(groups)
    out += u32(len(keys)) + b"".join(s(a) + s(b) + s(c) for a, b, c in keys)
    return out


def probe(usable=1, reason="", name="host CPU", arch="avx512bf16", cc=0, count=1, mps=2,
          mem=1 << 34, driver=""):
    return (u32(usable) + s(reason) + s(name) + s(arch) + u32(cc) + u32(count) + u32(mps) +
            u64(mem) + s(driver))


def record(path="/usr/lib/attnhost/plugins/p.so", name="p", state=0, reason="", caps_b=None,
           probe_b=None, hcc=0, kind=0):
    body = s(path) + s(name) + s("1.0") + s("vendor") + s("MIT") + s("a test plugin")
    body += u32(kind) + u32(state) + s(reason) + u32(hcc)
    body += struct.pack("<d", 1.5) + u64(2049) + u64(1234567) + u64(16384) + u64(1700000000 * 10**9)
    body += u64(1700000000 * 10**9 + 5)  # ctime_ns
    body += u64(0xDEADBEEFCAFEF00D)
    body += (u32(1) + caps_b) if caps_b is not None else u32(0)
    body += (u32(1) + probe_b) if probe_b is not None else u32(0)
    return b"AHRC" + u32(2) + u32(len(body)) + body


def cache_table(records):
    """The fuzz_record cache-mode input: count byte, then (hash, len, record) entries."""
    out = bytes([len(records)])
    for i, r in enumerate(records):
        out += u64(0x1111 * (i + 1)) + u32(len(r)) + r
    return out


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def records():
    good = record(caps_b=caps(), probe_b=probe())
    unavailable = record(name="cuda_x", state=1, reason="libcuda.so.1 not found", kind=1,
                         caps_b=caps(q=0xC, kv=0x3C, qk=int_set((64, 128, 256)),
                                     v=int_set((64, 128, 256)), blocks=int_set((16,), 16, 4096, 16),
                                     features=0x1FF, attn=0xF, layouts=0x6, pref_layout=2,
                                     graph=3, fill=1, fwk=1, keys=()),
                         probe_b=probe(usable=0, reason="libcuda.so.1 not found", name="", arch="",
                                       mps=0, mem=0))
    hip = record(name="rocm_y", state=0, kind=2, hcc=1,
                 caps_b=caps(gfx=("gfx942", "gfx90a"), q=0x6, kv=0x6, keys=(("a", None, None),
                                                                          ("b", "x", "y"))),
                 probe_b=probe(name="MI300X", arch="gfx942", mps=304, driver="6.2"))
    rejected = record(name="bad", state=2, reason="plugin ABI 2.0, host ABI 1.0")
    quarantined = record(path=None, name="crash", state=3,
                         reason="killed by SIGSEGV; last stderr: boom")
    return [good, unavailable, hip, rejected, quarantined]


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def mutant(attn=0, reqs=((3, 5), (0, 0), (7, 20)), ext=b""):
    """A valid fuzz_batch mutant (block size 16, limits equal to the batch,
    overwrite 11: none), then the ABI 2.1/2.2 bytes. With these requests
    (query_len, seq_len) are (4, 9), (1, 1), (8, 28): two blocks of width."""
    body = bytes([1 | 4, attn, 4, len(reqs) - 1]) + b"".join(bytes(r) for r in reqs)
    body += bytes([0, 0, 0, 11]) + u16(0) + u32(0)  # slack, prefix, overwrite none
    body += bytes(5) + bytes([0])  # limits = the batch's; no NULL arrays
    return body + ext


# The ext byte's bits (fuzz_batch.c build_ext), each followed by its bytes:
ENC, MASK, GROUPS, WINDOW, CP, RAGGED = 1, 2, 4, 8, 16, 32


def enc(*lens, raw=False):
    return bytes([1 if raw else 0]) + b"".join(u32(v) if raw else bytes([v]) for v in lens)


def mask(first=0, nudge_at=0, nudge=0, len_delta=0):
    return bytes([first]) + u16(nudge_at) + bytes([nudge & 0xFF, len_delta & 0xFF])


def groups(count, kv_group, *entries, null=False, raw_count=False):
    # raw: a byte with 0x80 set whose value % 6 is the count; else 1 + c % 4
    c = next(b for b in range(0x80, 0xC0) if b % 6 == count) if raw_count else (count - 1) % 4
    return bytes([c | (0x40 if null else 0), kv_group]) + b"".join(entries)


OWN = bytes([0])  # an entry standing for the batch's own fields


def entry(release_req=0, release_blocks=0, poke=0, idx=0, value=0):
    return bytes([1, (release_req << 4) | release_blocks, poke]) + u16(idx) + u32(value)


def small_entry(size):
    return bytes([2, size])


def ragged(ctx=(0, 0, 0), causal=True, nudge_at=0, nudge=0, tail=0, raw=None, null=False,
           keys=None):
    """ABI 2.3 ragged keys: how (bit 0 non-causal, 1 raw lengths, 2 NULL,
    3 a ragged_keys byte follows: 1 context), per request a context length
    (k_len = query_len + it) or a raw k_len, then a nudge of one
    cu_seqlens_k entry and num_k_tokens' excess."""
    how = (0 if causal else 1) | (2 if raw else 0) | (4 if null else 0) | (8 if keys else 0)
    lens = b"".join(u32(v) for v in raw) if raw else bytes(ctx)
    place = bytes([keys]) if keys else b""
    return bytes([how]) + place + lens + u16(nudge_at) + bytes([nudge & 0xFF, tail])


def abi23_seeds():
    """fuzz_batch seeds for the ABI 2.3 ragged keys (verdict in the name)."""
    seeds = {
        "ragged_ok": ragged(ctx=(0, 3, 7)),
        "ragged_bidir_few_keys": ragged(causal=False, raw=(2, 1, 5)),
        "ragged_causal_few_keys": ragged(raw=(2, 1, 9)),
        "ragged_not_monotonic": ragged(ctx=(0, 3, 7), nudge_at=2, nudge=-9),
        "ragged_tail": ragged(ctx=(0, 3, 7), tail=1),
        "ragged_null": ragged(null=True),
        "ragged_past_max": ragged(raw=(4, 1, 4000)),
        # a context step: no key for one request, fewer keys than queries
        "ragged_context_ok": ragged(raw=(0, 1, 5), keys=1),
        "ragged_context_unknown": ragged(ctx=(0, 3, 7), keys=9),
    }
    for name, data in seeds.items():
        write("batch", "abi23_" + name, mutant(ext=bytes([RAGGED]) + data))


def abi21_seeds():
    """fuzz_batch seeds for the ABI 2.1/2.2 fields (the verdict each aims at
    in its name); the replay test requires them."""
    seeds = {
        "enc_cross_ok": mutant(3, ext=bytes([ENC]) + enc(10, 0, 20)),
        "enc_negative": mutant(3, ext=bytes([ENC]) + enc(5, -1, 3, raw=True)),
        "enc_past_max": mutant(3, ext=bytes([ENC]) + enc(5, 4000, 3, raw=True)),
        "mask_ok": mutant(ext=bytes([MASK]) + mask()),
        "mask_offset_ok": mutant(ext=bytes([MASK]) + mask(first=7)),
        "mask_short": mutant(ext=bytes([MASK]) + mask(len_delta=-1)),
        "mask_bad_span": mutant(ext=bytes([MASK]) + mask(nudge_at=2, nudge=1)),
        "groups_own_ok": mutant(ext=bytes([GROUPS]) + groups(2, 1, OWN, OWN)),
        "groups_entry_ok": mutant(ext=bytes([GROUPS]) + groups(2, 1, OWN, entry())),
        "groups_entry_bad_block": mutant(ext=bytes([GROUPS]) +
                                         groups(2, 1, OWN, entry(poke=1, idx=4, value=99))),
        "groups_entry_bad_slot": mutant(ext=bytes([GROUPS]) +
                                        groups(2, 1, OWN, entry(poke=2, idx=3, value=5))),
        "groups_entry_few_blocks": mutant(ext=bytes([GROUPS]) +
                                          groups(2, 1, OWN, entry(poke=3, value=1))),
        "groups_entry_small": mutant(ext=bytes([GROUPS]) + groups(2, 1, OWN, small_entry(4))),
        "groups_count_zero": mutant(ext=bytes([GROUPS]) + groups(0, 1, raw_count=True)),
        "groups_count_short": mutant(ext=bytes([GROUPS]) + groups(1, 2, OWN)),
        "groups_null": mutant(ext=bytes([GROUPS]) + groups(2, 1, OWN, OWN, null=True)),
        # request 2: first query at position 20; block 0 (positions 0..15)
        # is hidden by a window of 4, not by one of 100
        "released_ok": mutant(ext=bytes([GROUPS | WINDOW]) +
                              groups(1, 0, entry(release_req=2, release_blocks=1)) + u16(4)),
        "released_visible": mutant(ext=bytes([GROUPS | WINDOW]) +
                                   groups(1, 0, entry(release_req=2, release_blocks=1)) + u16(100)),
        "released_no_window": mutant(ext=bytes([GROUPS]) +
                                     groups(1, 0, entry(release_req=2, release_blocks=1))),
        "released_new_token": mutant(ext=bytes([GROUPS | WINDOW]) +
                                     groups(1, 0, entry(release_req=2, release_blocks=2)) + u16(4)),
        "released_cross": mutant(3, ext=bytes([ENC | GROUPS | WINDOW]) + enc(4, 1, 8) +
                                 groups(1, 0, entry(release_req=2, release_blocks=1)) + u16(4)),
        "all_fields": mutant(ext=bytes([ENC | MASK | GROUPS | WINDOW | CP]) + enc(1, 2, 3) +
                             mask() + groups(2, 1, OWN, entry(release_req=2, release_blocks=1)) +
                             u16(4) + u32(5) + u32(1) + u32(14)),
    }
    for name, data in seeds.items():
        write("batch", "abi21_" + name, data)
    write("batch", "abi22_cp_local", mutant(ext=bytes([CP]) + u32(5) + u32(1) + u32(14)))
    write("batch", "abi22_cp_local_garbage", mutant(ext=bytes([CP]) + u32(-7) + u32(1 << 31) + u32(0)))
    write("batch", "abi22_cp_local_released",
          mutant(ext=bytes([GROUPS | WINDOW | CP]) +
                 groups(1, 0, entry(release_req=2, release_blocks=1)) + u16(4) + u32(4) + u32(1) +
                 u32(14)))


def f32(x):
    return struct.pack("<f", x)


def scale_tensor(values, device=0, offset=0, ndim=1, fp16=False, null=False):
    """A fuzz_scales tensor: the how byte (present, rank, device index into
    cpu, cuda:0, cuda:1, cuda_host, byte offset), its length, the dtype byte
    (fp32 unless fp16), no strides, the values, the data-NULL byte."""
    how = 1 | (ndim % 3) << 1 | device << 3 | offset << 5
    shape = bytes([len(values)]) if ndim else b""
    return (bytes([how]) + shape + bytes([16 | 4 if fp16 else 0, 0]) +
            b"".join(f32(v) for v in values) + bytes([7 if null else 0]))


NO_TENSOR = bytes([0])


def scales_seeds():
    """fuzz_scales seeds: each scale form accepted, and a refusal of each
    kind (the verdict each aims at in its name). The mode byte: kv_scales
    (0 host, 1 tensor, 2 per head), 4 q scale, 8 MLA, device << 4 (0 cpu,
    1 cuda:0), 64 a forward call (carries the query scale)."""
    def seed(mode, floats, tensors, heads=2):
        hk = b"" if mode & 8 else bytes([heads - 1])
        return bytes([mode]) + hk + b"".join(f32(x) for x in floats) + b"".join(tensors)
    per_head = [scale_tensor([0.01, 0.02]), scale_tensor([0.5, 0.25]), NO_TENSOR]
    seeds = {
        "host_ok": seed(64, (0.5, 0.0, 0.0), [NO_TENSOR] * 3),
        "host_q_ok": seed(64 | 4, (0.5, 0.25, 0.01), [NO_TENSOR] * 3),
        "per_head_cpu_ok": seed(64 | 2, (0.0, 0.0, 0.0), per_head),
        "tensor_cuda_q_ok": seed(64 | 16 | 4 | 1, (0.0, 0.0, 0.0),
                                 [scale_tensor([-1.0], 1)] * 2 + [scale_tensor([2.0], 1)]),
        "tensor_mla_no_v_ok": seed(8 | 1, (0.0, 0.0, 0.0),
                                   [scale_tensor([0.1]), NO_TENSOR, NO_TENSOR]),
        "per_head_zero_refused": seed(2, (0.0, 0.0, 0.0),
                                      [scale_tensor([0.01, 0.0]), scale_tensor([1.0, 1.0]),
                                       NO_TENSOR]),
        "both_forms_refused": seed(1, (0.5, 0.0, 0.0), [scale_tensor([0.5])] * 2 + [NO_TENSOR]),
        "wrong_length_refused": seed(2, (0.0, 0.0, 0.0),
                                     [scale_tensor([0.5])] * 2 + [NO_TENSOR]),
        "wrong_device_refused": seed(1, (0.0, 0.0, 0.0),
                                     [scale_tensor([0.5], 1)] * 2 + [NO_TENSOR]),
        "dtype_refused": seed(1, (0.0, 0.0, 0.0),
                             [scale_tensor([0.5], fp16=True)] * 2 + [NO_TENSOR]),
        "misaligned_refused": seed(1, (0.0, 0.0, 0.0),
                                   [scale_tensor([0.5], offset=2)] * 2 + [NO_TENSOR]),
        "host_tensor_refused": seed(0, (0.0, 0.0, 0.0), [scale_tensor([0.5])] + [NO_TENSOR] * 2),
        "q_without_spec_refused": seed(64, (0.0, 0.0, 0.5), [NO_TENSOR] * 3),
        "nan_float_refused": seed(0, (float("nan"), 0.0, 0.0), [NO_TENSOR] * 3),
    }
    for name, data in seeds.items():
        write("scales", name, data)


def rf_str(x):
    b = x.encode()
    return u32(len(b)) + b


def f64(x):
    return struct.pack("<d", x)


def rf_key(path, fp):
    """A record file entry's key (record_file.c): path, plugin, version,
    seven u64 (eight with the driver fingerprint), three u32, four strings."""
    out = rf_str(path) + rf_str("cuda_fa3") + rf_str("1.4")
    out += b"".join(u64(v) for v in (2049, 77, 123456, 10**18, 10**18 + 5, 0xABCDEF, 0x1234))
    if fp:
        out += u64(0x5555)
    out += u32(0x20004) + u32(1) + u32(90)
    return out + rf_str("NVIDIA H100 80GB HBM3") + rf_str("sm_90") + rf_str("580.159.04") + rf_str("")


def rf_table(tune, entries):
    """fuzz_recfile's input: the format (odd: the tune table), the count,
    then each entry as u32 length + bytes."""
    body = b"".join(u32(len(e)) + e for e in entries)
    return bytes([1 if tune else 0, len(entries)]) + body


def recfile_seeds():
    chk = [rf_key("/usr/lib/attnhost/plugins/cuda_fa3.so", False) + u32(70) + u32(0) + u32(1)
           + u32(2) + u64(1764300000) + rf_str("0.24.0"),
           rf_key("/opt/p/x.so", False) + u32(3) + u32(1) + u32(0) + u32(0) + u64(0) + rf_str("")]
    tune = [rf_key("/usr/lib/attnhost/plugins/cuda_fa3.so", True) + rf_str("0/32/8/128/128/1/1/64")
            + u32(1) + f64(0.742) + rf_str("d64x8192") + u64(1764300000) + rf_str("0.24.0"),
            rf_key("/usr/lib/attnhost/plugins/triton.so", True) + rf_str("k|mixed whole")
            + u32(0) + f64(1.25) + rf_str("") + u64(1) + rf_str("0.24.0")]
    write("recfile", "check_empty", rf_table(False, []))
    write("recfile", "check_two", rf_table(False, chk))
    write("recfile", "check_bad_graph_level", rf_table(False, [chk[0][:-22] + u32(9) + chk[0][-18:]]))
    write("recfile", "tune_empty", rf_table(True, []))
    write("recfile", "tune_two", rf_table(True, tune))
    write("recfile", "tune_count_past_table", rf_table(True, tune)[:1] + bytes([3]) + rf_table(True, tune)[2:])


def hfconfig_seeds():
    """fuzz_hfconfig's input: an options byte, then a config.json
    (tests/data/hf_configs/): as it is, at tensor parallel 8 with hybrid KV
    groups, and cut short."""
    src = os.path.join(HERE, "..", "data", "hf_configs")
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb") as f:
            text = f.read()
        stem = name[: -len(".json")]
        write("hfconfig", stem, bytes([0]) + text)
        write("hfconfig", stem + "_tp8_hybrid", bytes([2 | 4]) + text)
    write("hfconfig", "truncated", bytes([0]) + text[: len(text) // 2])
    write("hfconfig", "not_an_object", bytes([0]) + b"[1, 2, 3]")


def main():
    recs = records()
    for i, r in enumerate(recs):
        write("record", "msg_%d" % i, r)
    write("record", "msg_truncated", recs[0][:40])
    write("record", "cache_all", cache_table(recs[:4]))
    write("record", "cache_one", cache_table(recs[:1]))
    write("record", "cache_null_path", cache_table([recs[4]]))
    write("record", "cache_empty", bytes([0]))

    # fuzz_batch: mode, attn_type, block-size selector, then the batch.
    # Mutant mode (bit 0): n-1, per request (query_len-1, extra context), stride
    # slack, block slack, prefix flag, overwrite (field, u16 index, u32 value).
    for field in range(12):
        body = bytes([1 | 4, 0, 4, 2, 3, 5, 0, 0, 7, 20, 1, 2, 1, field]) + u32(0)[:2] + u32(
            0x7FFFFFFF) + bytes([0, 0, 0, 0, 0, 0])
        write("batch", "mutant_%02d" % field, body)
    write("batch", "mutant_cross", bytes([1, 3, 4, 1, 4, 9, 0, 0, 0, 11]) + u32(0)[:2] + u32(5))
    raw = bytes([0, 0, 4, 2]) + u32(3)[:2] + bytes([1]) + u32(2) + u32(5) + u32(8) + bytes([0])
    raw += u32(0) + u32(1) + u32(3) + u32(4) + u32(5) + u32(0) + u32(1) + u64(4) + u64(17) + u64(18)
    write("batch", "raw_valid", raw)
    write("batch", "empty", b"")

    abi21_seeds()
    abi23_seeds()
    scales_seeds()
    recfile_seeds()
    hfconfig_seeds()

    # fuzz_descriptor: a few shapes; the fuzzer takes it from there.
    write("descriptor", "full_sizes", bytes([5, 0, 6]) + b"abi_ok" + bytes([0] * 40))
    write("descriptor", "zeros", bytes(64))
    write("descriptor", "old_sizes", bytes([0, 0, 3]) + b"old" + bytes([0, 0, 0, 0, 0, 0, 0, 0]) +
          bytes([0, 0x06, 0x06]) + bytes([0, 2, 64, 128, 0]) * 3 + bytes([64, 1, 1, 2, 1]))
    write("descriptor", "huge_counts", bytes([4, 0, 1]) + b"h" + bytes([4] * 8) + bytes([0xff] * 30))


if __name__ == "__main__":
    main()
