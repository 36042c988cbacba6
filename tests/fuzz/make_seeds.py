#!/usr/bin/env python3
"""Regenerate the binary seed corpora (record, batch, descriptor) of the fuzz
targets. The text corpora (config, model) are copies of the example files
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

    # fuzz_descriptor: a few shapes; the fuzzer takes it from there.
    write("descriptor", "full_sizes", bytes([5, 0, 6]) + b"abi_ok" + bytes([0] * 40))
    write("descriptor", "zeros", bytes(64))
    write("descriptor", "old_sizes", bytes([0, 0, 3]) + b"old" + bytes([0, 0, 0, 0, 0, 0, 0, 0]) +
          bytes([0, 0x06, 0x06]) + bytes([0, 2, 64, 128, 0]) * 3 + bytes([64, 1, 1, 2, 1]))
    write("descriptor", "huge_counts", bytes([4, 0, 1]) + b"h" + bytes([4] * 8) + bytes([0xff] * 30))


if __name__ == "__main__":
    main()
