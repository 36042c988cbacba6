#!/usr/bin/env python3
"""Issue 23 on a GPU machine: a process that initialised CUDA before
ah_host_create must still see its CUDA plugins available (the scan runs in
the spawned attnhost-plugin-scanner, not in a fork of this process), and a
fresh `attnhost list` with the same scan cache must agree.

    python3 scripts/gpu_scan_check.py [build dir, default build]

Needs torch with CUDA and a build with the CUDA plugins. Exit 0: fixed.
"""
import ctypes
import os
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
tmp = tempfile.mkdtemp(prefix="ah_issue23_")
os.environ["XDG_CACHE_HOME"] = tmp  # the CLI's cache: <tmp>/attnhost/scan-cache
cache = os.path.join(tmp, "attnhost", "scan-cache")

import torch  # noqa: E402

torch.zeros(1, device="cuda")  # what every engine does before building its backend


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("config_path", ctypes.c_char_p),
                ("config_text", ctypes.c_char_p), ("plugin_dirs", ctypes.c_void_p),
                ("n_plugin_dirs", ctypes.c_uint32), ("no_default_dirs", ctypes.c_int),
                ("scan_mode", ctypes.c_int), ("cache_path", ctypes.c_char_p)]


class Info(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("name", ctypes.c_char_p),
                ("path", ctypes.c_char_p), ("version", ctypes.c_char_p),
                ("vendor", ctypes.c_char_p), ("license", ctypes.c_char_p),
                ("description", ctypes.c_char_p), ("device_kind", ctypes.c_int),
                ("state", ctypes.c_int), ("reason", ctypes.c_char_p), ("caps", ctypes.c_void_p),
                ("probe", ctypes.c_void_p), ("has_check_combination", ctypes.c_int),
                ("from_cache", ctypes.c_int), ("scan_ms", ctypes.c_double)]


lib = ctypes.CDLL(os.path.join(build, "lib", "libattnhost.so"))
lib.ah_host_plugin.restype = ctypes.POINTER(Info)
lib.ah_host_plugin_count.restype = ctypes.c_size_t
states = ["available", "unavailable", "rejected", "quarantined"]
opts = Options(ctypes.sizeof(Options), None, None, None, 0, 0, 0, cache.encode())
host = ctypes.c_void_p()
err = ctypes.create_string_buffer(1024)
rc = lib.ah_host_create(ctypes.byref(opts), ctypes.byref(host), err)
if rc != 0:
    sys.exit(f"ah_host_create: {err.value.decode()}")
bad = []
cuda = 0
for i in range(lib.ah_host_plugin_count(host)):
    p = lib.ah_host_plugin(host, i).contents
    name = p.name.decode()
    print(f"in-process host: {name:20s} {states[p.state]:12s} scan {p.scan_ms:7.1f} ms "
          f"{p.reason.decode()}")
    if name.startswith("cuda_"):
        cuda += 1
        if p.state != 0:
            bad.append(f"{name} {states[p.state]} in the CUDA-initialised process")
lib.ah_host_destroy(host)
out = subprocess.run([os.path.join(build, "bin", "attnhost"), "list"], capture_output=True,
                     text=True).stdout
for line in out.splitlines():
    if line.startswith("cuda_"):
        print("fresh attnhost list:", line)
        if "[available]" not in line:
            bad.append("fresh attnhost list (same cache): " + line)
if not cuda:
    bad.append("no cuda_* plugin found: build them first")
print("FAIL:\n  " + "\n  ".join(bad) if bad else "OK: CUDA plugins available after CUDA init")
sys.exit(1 if bad else 0)
