#!/usr/bin/env python3
"""attnhost doctor over fake device trees (--root): which packages each
device kind brings, read from /proc, /sys and /dev exactly as on a real
machine, and no GPU package where no GPU is.

usage: doctor_devices.py ATTNHOST
"""
import json
import os
import subprocess
import sys
import tempfile


def write(root, path, text=""):
    p = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def doctor(ah, root):
    r = subprocess.run([ah, "doctor", "--json", "--no-cache", "--root", root],
                       capture_output=True, text=True, env=dict(os.environ, ATTNHOST_PLUGIN_PATH=""))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def main():
    ah = sys.argv[1]
    cpu = "attnhost-plugin-cpu-amx"
    bad = 0
    with tempfile.TemporaryDirectory() as t:
        cases = {}
        # nothing: the CPU package only
        os.makedirs(os.path.join(t, "none"))
        cases["none"] = ([cpu], [], [])
        # NVIDIA, seen in /proc and /dev (the compute capability is not asked under --root)
        r = os.path.join(t, "nvidia")
        write(r, "/proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\n")
        write(r, "/dev/nvidia0")
        write(r, "/dev/nvidiactl")
        cases["nvidia"] = ([cpu], ["attnhost-plugin-cuda-flashinfer", "attnhost-plugin-cuda-fa3",
                                   "attnhost-plugin-triton"], ["NVIDIA H100 80GB HBM3"])
        # AMD gfx942 through KFD (node 0 is the CPU)
        r = os.path.join(t, "amd")
        write(r, "/dev/kfd")
        write(r, "/sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 8\ngfx_target_version 0\n")
        write(r, "/sys/class/kfd/kfd/topology/nodes/1/properties", "simd_count 304\ngfx_target_version 90402\n")
        cases["amd"] = ([cpu, "attnhost-plugin-triton", "attnhost-plugin-rocm-aiter"], [], ["AMD GPU"])
        # Intel: a render node of vendor 0x8086; another vendor's node is ignored
        r = os.path.join(t, "intel")
        write(r, "/sys/class/drm/renderD128/device/vendor", "0x8086\n")
        write(r, "/sys/class/drm/renderD128/device/device", "0x0bd5\n")
        write(r, "/sys/class/drm/renderD129/device/vendor", "0x1234\n")
        cases["intel"] = ([cpu, "attnhost-plugin-xpu"], [], ["Intel GPU (renderD128)"])
        for name, (fit, maybe, gpus) in cases.items():
            d = doctor(ah, os.path.join(t, name))
            got = (d["fit"], [m["package"] for m in d["may_fit"]], [g["name"] for g in d["gpus"]])
            want = (fit if d["cpu"]["x86_64"] else fit[1:], maybe, gpus)
            if got != want:
                bad = 1
                print(f"{name}: got {got}, want {want}")
            else:
                print(f"{name}: fit {fit}, may fit {maybe}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
