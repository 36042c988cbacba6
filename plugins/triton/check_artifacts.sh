#!/bin/sh
# Checks that plugins/triton/artifacts/ was generated from the kernel sources
# as they are now: the MANIFEST's sources hash must equal the sha256 over
# kernels/*.py and generate.py (each as '<path>\0<bytes>\0', sorted, exactly
# as generate.py computes it), and every artifact must match its recorded
# sha256. Needs only sh, sha256sum and printf; no Triton, no GPU.
# Exit 0: consistent. Exit 1: says what to regenerate.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
man="$dir/artifacts/MANIFEST"
[ -f "$man" ] || { echo "triton artifacts: $man missing; run generate.py"; exit 1; }

want=$(sed -n 's/^sources //p' "$man")
got=$(cd "$dir" && {
    for f in $(ls kernels/*.py | LC_ALL=C sort) generate.py; do
        printf '%s\0' "$f"; cat "$f"; printf '\0'
    done
} | sha256sum | cut -d' ' -f1)
status=0
if [ "$want" != "$got" ]; then
    echo "triton artifacts: kernel sources changed since generation (MANIFEST $want, now $got)."
    echo "  Regenerate: pip install triton==$(sed -n 's/^triton //p' "$man") && python3 $dir/generate.py"
    status=1
fi
n=0
while read -r kind hash path; do
    [ "$kind" = artifact ] || continue
    n=$((n + 1))
    if [ ! -f "$dir/artifacts/$path" ]; then
        echo "triton artifacts: $path listed in MANIFEST but missing"; status=1; continue
    fi
    h=$(sha256sum "$dir/artifacts/$path" | cut -d' ' -f1)
    [ "$h" = "$hash" ] || { echo "triton artifacts: $path differs from MANIFEST (edited by hand?)"; status=1; }
done < "$man"
extra=$(cd "$dir/artifacts" && ls */*.cubin */*.hsaco 2>/dev/null | while read -r f; do
    grep -q " $f\$" MANIFEST || echo "$f"; done)
[ -z "$extra" ] || { echo "triton artifacts: not in MANIFEST: $extra"; status=1; }
[ $status -ne 0 ] || echo "triton artifacts: $n files match MANIFEST; sources hash $got"
exit $status
