#!/bin/sh
# The xpu CTest xpu_isa_dpas: compiles the Intel tier's xmx modules with
# ocloc for the GPUs they are for (sub-groups of 16 for Data Center GPU
# Max, pvc; of 8 for Arc, acm-g10), disassembles each kernel and counts
# XMX dpas instructions in its ISA. ocloc says "Build succeeded" even where
# it dropped the matrix math (a module of the other sub-group size on Arc
# has no dpas and no math), so the ISA is what is checked: every xmx
# module must hold dpas, and the subgroup module, which computes the same
# products with shuffles, none. Exit 77 (skipped) without ocloc
# (intel-opencl-icd) or libiga64 (its disassembler, libigc1).
#   isa.sh OCLOC SPV_XMX16 SPV_XMX8 SPV_SUBGROUP16
ocloc=$1
if [ -z "$ocloc" ] || ! command -v "$ocloc" >/dev/null 2>&1; then
  echo "skipped: ocloc not found (Debian intel-opencl-icd)"
  exit 77
fi
iga=$(ls /usr/lib/*/libiga64.so.1 2>/dev/null | head -n 1)
if [ -z "$iga" ]; then
  echo "skipped: libiga64.so.1 not found (Debian libigc1), ocloc cannot disassemble"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# ocloc disasm opens libiga64.so, which only the -dev package links
mkdir "$work/lib" && ln -s "$iga" "$work/lib/libiga64.so"
fail=0
check() { # SPV DEVICE WANT(dpas|none)
  name=$(basename "$1" .spv)-$2
  out="$work/$name"
  if ! "$ocloc" compile -q -spirv_input -file "$1" -device "$2" -output "$out" >"$work/log" 2>&1; then
    echo "FAIL $name: ocloc compile failed"; cat "$work/log"; fail=1; return
  fi
  bin=$(ls "$out"*.bin | head -n 1)
  LD_LIBRARY_PATH="$work/lib" "$ocloc" disasm -file "$bin" -device "$2" -dump "$out.d" >/dev/null 2>&1
  asm=$(ls "$out.d"/*KernelHeap.asm 2>/dev/null | head -n 1)
  if [ -z "$asm" ]; then
    echo "FAIL $name: ocloc disasm wrote no ISA"; fail=1; return
  fi
  n=$(grep -c 'dpas' "$asm")
  lines=$(wc -l <"$asm")
  got=none
  [ "$n" -gt 0 ] && got=dpas
  if [ "$got" = "$3" ]; then
    echo "ok   $name: $n dpas in $lines lines of ISA"
  else
    echo "FAIL $name: $n dpas in $lines lines of ISA, expected $3"; fail=1
  fi
  grep -m 2 'dpas' "$asm"
}
check "$2" pvc dpas
check "$3" acm-g10 dpas
check "$4" pvc none
[ $fail = 0 ] && echo "xpu_isa_dpas: passed" || echo "xpu_isa_dpas: failed"
exit $fail
