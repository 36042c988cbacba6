#!/bin/sh
# Install this build into a scratch prefix, build the vendor example against
# the installed headers only, drop its .so into a plugin directory, and see
# it discovered, validated, bound and passing the conformance suite.
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work/plugins"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
cp "$work/build/acme_attn.so" "$work/plugins/"
chmod 755 "$work/plugins" "$work/plugins/acme_attn.so"
ah="$work/prefix/bin/attnhost"
model="$work/model.ini"
cat >"$model" <<'INI'
[model]
name = tiny
num_layers = 2
num_q_heads = 4
num_kv_heads = 2
head_size = 64
dtype = fp32
INI
cfg="$work/acme.ini"
printf '[select]\npriority = acme_attn\nfallback = error\n' >"$cfg"
"$ah" list --no-cache --plugin-dir "$work/plugins" --plugin acme_attn | tee "$work/list.txt"
grep -q 'acme_attn 1.0.0 (Acme Corp, cpu) \[available\]' "$work/list.txt"
"$ah" bind --no-cache --plugin-dir "$work/plugins" --config "$cfg" --model "$model" | tee "$work/bind.txt"
grep -q '^1 *acme_attn *acme_attn' "$work/bind.txt"
"$ah" check --no-cache --plugin-dir "$work/plugins" --plugin acme_attn --quick
echo "vendor plugin: installed headers only, discovered, bound, conformant"
