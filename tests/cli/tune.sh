#!/bin/sh
# attnhost tune and [select] policy = measured end to end on the CPU, with
# two test plugins of different speeds (tests/select_plugins/speed_plugin.c):
# spd_slow ranks higher and busy-waits 20 ms per request of each forward;
# spd_fast ranks lower. The tune table lives beside the scan cache under
# $WORK. Last, a mixed step between the two as decode and prefill winners:
# split, under [select] mixed_steps = whole, and under measured as tune
# timed it.
#   tune.sh <attnhost> <speed plugin dir> <work dir>
set -u
AH=$1 SPEED=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK/plugins" "$WORK/cache" && chmod 700 "$WORK/plugins"
cp "$SPEED"/spd_fast.so "$SPEED"/spd_slow.so "$WORK/plugins/"
cd "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
cat > m.ini <<'M'
[model]
name = tiny
num_layers = 2
num_q_heads = 2
num_kv_heads = 1
head_size = 16
dtype = fp32
M
sed 's/num_q_heads = 2/num_q_heads = 4/' m.ini > untuned.ini
printf '[search]\ncache = %s/cache/scan-cache\n[select]\npolicy = measured\n' "$WORK" > measured.ini
printf '[search]\ncache = %s/cache/scan-cache\n[select]\npolicy = priority\n' "$WORK" > priority.ini
run() { cmd=$1 cfg=$2; shift 2; ATTNHOST_PLUGIN_PATH= "$AH" "$cmd" --config "$cfg" --plugin-dir "$WORK/plugins" "$@"; }
winner() { run bind "$1" --model "$2" 2>&1 | awk '$1 == "0" {print $2 "/" $3}'; }

[ "$(winner measured.ini m.ini)" = "spd_slow/spd_slow" ] || fail "untuned: priority (spd_slow) should win"
run tune measured.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > tune.log 2>&1 ||
    { cat tune.log; fail "tune failed"; }
# 2 plugins x 2 phases, and the mixed step whole on each and split between them both ways
grep -q "recorded 8 measurements" tune.log || { cat tune.log; fail "tune did not record 8 measurements"; }
grep -q "^  mixed *spd_slow *split with spd_fast: m2x64+2x64@64 [0-9.]* ms$" tune.log ||
    { cat tune.log; fail "tune: the mixed step split"; }
[ "$(winner measured.ini m.ini)" = "spd_fast/spd_fast" ] || fail "measured: spd_fast should win"
run explain measured.ini --model m.ini --layer 0 > explain.log 2>&1
grep -q "policy measured: spd_fast fastest" explain.log || { cat explain.log; fail "explain: why it won"; }
grep -q "spd_slow *\[measured [0-9.]* ms\] lost_on_priority: measured" explain.log ||
    { cat explain.log; fail "explain: measured times"; }
[ "$(winner priority.ini m.ini)" = "spd_slow/spd_slow" ] || fail "policy priority: spd_slow should win"
# an untuned spec keeps the priority order, and says so
[ "$(winner measured.ini untuned.ini)" = "spd_slow/spd_slow" ] || fail "untuned spec: spd_slow should win"
run explain measured.ini --model untuned.ini --layer 0 2>&1 | grep -q "untuned" || fail "explain: untuned"
# an explicit priority list is never reordered
printf '[select]\npriority = spd_slow, spd_fast\n' >> measured.ini
[ "$(winner measured.ini m.ini)" = "spd_slow/spd_slow" ] || fail "explicit list: spd_slow should win"
sed -i '/^priority = /d' measured.ini
# a changed plugin file invalidates its entries
sleep 1 && touch "$WORK/plugins/spd_fast.so"
[ "$(winner measured.ini m.ini)" = "spd_slow/spd_slow" ] || fail "changed file: priority should win"
run explain measured.ini --model m.ini --layer 0 2>&1 | grep -q "changed since it was tuned" ||
    fail "explain: changed plugin file"
run tune measured.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > tune2.log 2>&1 || fail "retune"
[ "$(winner measured.ini m.ini)" = "spd_fast/spd_fast" ] || fail "retuned: spd_fast should win"
# a corrupt table: a warning, the priority order, and the next tune replaces it
cp cache/tune-table good-table
printf 'AHTUNETB garbage' > cache/tune-table
run explain measured.ini --model m.ini --layer 0 > corrupt.log 2>&1
grep -q "warning: tune table .* ignored: " corrupt.log || { cat corrupt.log; fail "corrupt: no warning"; }
[ "$(winner measured.ini m.ini)" = "spd_slow/spd_slow" ] || fail "corrupt: priority should win"
run tune measured.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > tune3.log 2>&1 || fail "tune over corrupt"
[ "$(winner measured.ini m.ini)" = "spd_fast/spd_fast" ] || fail "replaced: spd_fast should win"
# a table this user may not write: read where trusted, never written, a warning
if [ "$(id -u)" = 0 ]; then
    chown 65534 cache/tune-table    # another user's: not trusted, not written
    run tune measured.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > ro.log 2>&1 &&
        fail "tune wrote another user's table"
    grep -q "warning: tune table not written: .*read-only" ro.log || { cat ro.log; fail "read-only: no warning"; }
else
    chmod 555 cache                 # a shared, read-only directory: read, not written
    [ "$(winner measured.ini m.ini)" = "spd_fast/spd_fast" ] || fail "read-only dir: the table is read"
    run tune measured.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > ro.log 2>&1 &&
        fail "tune wrote into a read-only directory"
    grep -q "warning: tune table not written" ro.log || { cat ro.log; fail "read-only: no warning"; }
    chmod 755 cache
fi
[ "$(id -u)" = 0 ] && chown 0 cache/tune-table
# a mixed step between two winners (bench names how it ran): split under
# [select] mixed_steps = split, whole under whole; under measured (the
# default), as tune timed the pair: spd_slow's prefills beside spd_fast's
# decodes split (whole would put the decodes on the slow plugin), spd_fast's
# prefills beside spd_slow's decodes whole; split again once spd_slow's
# file changed
pair() { printf '[search]\ncache = %s/cache/scan-cache\n[select]\nprefill_priority = %s\ndecode_priority = %s\n%b' \
    "$WORK" "$1" "$2" "$3"; }
pair spd_slow spd_fast 'mixed_steps = split\n' > split.ini
pair spd_slow spd_fast 'mixed_steps = whole\n' > whole.ini
pair spd_slow spd_fast 'mixed_steps = measured\n' > measured_split.ini
pair spd_fast spd_slow '' > measured_whole.ini
mixed_run() { # config, the winners as bench prints them, how the step should run
    run bench $1.ini --model m.ini --step m2x32+1x32@16 --iters 1 > bench_$1.log 2>&1 ||
        { cat bench_$1.log; fail "bench, $1.ini"; }
    grep -q "m2x32+1x32@16 *default .*($2) *block [0-9]*, $3$" bench_$1.log ||
        { cat bench_$1.log; fail "bench, $1.ini: the mixed step should run $3"; }
}
mixed_bind() { # config, what bind says of the mixed steps
    run bind $1.ini --model m.ini > bind_$1.log 2>&1 || { cat bind_$1.log; fail "bind, $1.ini"; }
    grep -q "^mixed steps: $2" bind_$1.log || { cat bind_$1.log; fail "bind, $1.ini: mixed steps $2"; }
}
mixed_run split "spd_slow / spd_fast" split
mixed_bind split "split (2 layers with two winners)$"
mixed_run whole "spd_slow / spd_fast" whole
mixed_bind whole "whole (2 layers with two winners)$"
mixed_run measured_split "spd_slow / spd_fast" split
mixed_bind measured_split "split (mixed_steps = measured: tuned [0-9.]* ms whole, [0-9.]* ms split, over the 2 layers"
mixed_run measured_whole "spd_fast / spd_slow" whole
mixed_bind measured_whole "whole (mixed_steps = measured: tuned [0-9.]* ms whole, [0-9.]* ms split, over the 2 layers"
sleep 1 && touch "$WORK/plugins/spd_slow.so"
mixed_run measured_whole "spd_fast / spd_slow" split
mixed_bind measured_whole "split (2 layers with two winners)$"
# policy = measured and mixed_steps = measured (the default) together, as
# on a GPU machine: with spd_fast slow at decode, the measured winners are
# spd_fast (prefill) and spd_slow (decode); tune says how that pair runs
# the mixed step, and bench runs it so (split: whole would put the decodes
# on spd_fast)
printf '[search]\ncache = %s/cache/scan-cache\n[select]\npolicy = measured\n[plugin.spd_fast]\ndecode_delay_us = 30000\n' \
    "$WORK" > both.ini
run tune both.ini --model m.ini --max-context 64 --max-batch 2 --iters 3 > tune_both.log 2>&1 ||
    { cat tune_both.log; fail "tune, both measured"; }
grep -q "^  mixed *the fastest pair (spd_fast prefill, spd_slow decode) runs it split: " tune_both.log ||
    { cat tune_both.log; fail "tune: how the fastest pair runs the mixed step"; }
mixed_run both "spd_fast / spd_slow" split
# a layer's ragged prefill form (DeepSeek's prefill, here the layer's own
# sizes over packed K/V): the speed plugins compute it right (run checks it
# against the oracle, context passes merged by LSE); tune times it on each
# plugin on its own, and policy = measured then binds it to the faster
sed 's/^dtype = fp32$/dtype = fp32\nragged_prefill = true/' m.ini > rag.ini
run run measured.ini --no-cache --plugin spd_fast --model rag.ini --batch 4 --prompt-len 24 --steps 1 \
    > run_rag.log 2>&1 || { cat run_rag.log; fail "run of the ragged form"; }
grep -q "ragged form (qk 16 / v 16 over packed K/V, 2 context steps merged by LSE),.* ok$" run_rag.log ||
    { cat run_rag.log; fail "run: the ragged form"; }
ragged_winner() { run explain "$1" --model rag.ini --layer 0 2>&1 | awk '/ragged prefill form:/ {print $NF}'; }
[ "$(ragged_winner measured.ini)" = "spd_slow" ] || fail "untuned ragged form: priority (spd_slow) should win"
run tune measured.ini --model rag.ini --max-context 64 --max-batch 2 --iters 3 > tune_rag.log 2>&1 ||
    { cat tune_rag.log; fail "tune, ragged"; }
grep -q "^  ragged *spd_slow *p1x64 [0-9.]* ms .* = [0-9.]* ms$" tune_rag.log &&
    grep -q "^  ragged *fastest: spd_fast$" tune_rag.log &&
    grep -q "recorded 10 measurements" tune_rag.log || { cat tune_rag.log; fail "tune: the ragged form"; }
[ "$(ragged_winner measured.ini)" = "spd_fast" ] || fail "measured: spd_fast should run the ragged form"
run explain measured.ini --model rag.ini --layer 0 2>&1 | grep -A2 "ragged prefill form" |
    grep -q "policy measured: spd_fast fastest" || fail "explain: why spd_fast runs the ragged form"
[ "$(ragged_winner priority.ini)" = "spd_slow" ] || fail "policy priority: spd_slow should run the ragged form"
# bench times the form on each plugin that serves it, at prefill steps only
run bench priority.ini --model rag.ini --step p1x64 --step d2x64 --iters 1 > bench_rag.log 2>&1 ||
    { cat bench_rag.log; fail "bench, ragged"; }
grep -q "^  p1x64 *ragged:spd_fast .* block 16, ragged on spd_fast$" bench_rag.log &&
    grep -q "^  p1x64 *ragged:spd_slow .* block 16, ragged on spd_slow$" bench_rag.log &&
    ! grep -q "d2x64 *ragged:" bench_rag.log || { cat bench_rag.log; fail "bench: the ragged rows"; }
echo "tune: ok"
