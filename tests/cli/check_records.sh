#!/bin/sh
# `attnhost check` records the conformance outcome; `attnhost list` shows it
# (text and JSON); [select] require_checked selects the checked plugin and
# refuses it once its run failed or its file changed.
# Usage: check_records.sh ATTNHOST MUTANT_SO (tests/conformance's conf_mutant.so)
set -eu
ah=$1 so=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks '$2'"; }; }
mkdir "$tmp/plugins"
cp "$so" "$tmp/plugins/conf_mutant.so"
chmod 755 "$tmp" "$tmp/plugins"
records="$tmp/cache/check-records"
printf '[search]\ncache = %s/cache/scan-cache\n' "$tmp" > "$tmp/plain.ini"
printf '[search]\ncache = %s/cache/scan-cache\n[select]\nrequire_checked = true\n' "$tmp" > "$tmp/req.ini"
cp "$tmp/req.ini" "$tmp/bug.ini"
printf '[plugin.conf_mutant]\nbug = skip_head\n' >> "$tmp/bug.ini"
printf '[model]\nname = t\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\nhead_size = 64\ndtype = fp32\nblock_size = 16\n' > "$tmp/model.ini"
run() { "$ah" "$@" --plugin-dir "$tmp/plugins"; }
today=$(date -u +%Y-%m-%d)

run list --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/list0" 2>&1
has "$tmp/list0" "  check: not checked here"
run explain --config "$tmp/req.ini" --model "$tmp/model.ini" > "$tmp/explain0" 2>&1 || true
has "$tmp/explain0" "not_checked: check = not checked on this device (run attnhost check --plugin conf_mutant)"

run check --config "$tmp/plain.ini" --plugin conf_mutant --quick > "$tmp/check" 2>&1 ||
    { cat "$tmp/check"; fail "check failed"; }
passed=$(sed -n 's/^== conf_mutant: \([0-9]*\) passed, 0 failed.*/\1/p' "$tmp/check")
[ -n "$passed" ] || { cat "$tmp/check"; fail "no summary line"; }
has "$tmp/check" "recorded in $records: conf_mutant passed on this device: $passed passed, 0 failed"
has "$tmp/check" "graph ALWAYS"
[ -f "$records" ] || fail "no $records"

run list --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/list1" 2>&1
has "$tmp/list1" "  check: checked $today: $passed passed, "
has "$tmp/list1" "graph ALWAYS (attnhost "
run list --json --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/json1" 2>&1
has "$tmp/json1" "\"check\": {\"ok\": true, \"date\": \"$today\""
has "$tmp/json1" "\"passed\": $passed, \"failed\": 0"
has "$tmp/json1" "\"graph_level\": \"ALWAYS\""
has "$tmp/json1" "\"check_records\": \"$records\""
run explain --config "$tmp/req.ini" --model "$tmp/model.ini" > "$tmp/explain1" 2>&1 ||
    { cat "$tmp/explain1"; fail "explain failed under require_checked"; }
has "$tmp/explain1" "-> conf_mutant"

# A failing run (a planted bug) is recorded and does not count.
if run check --config "$tmp/bug.ini" --plugin conf_mutant --quick > "$tmp/checkbug" 2>&1; then
    fail "check passed a planted bug"
fi
has "$tmp/checkbug" "recorded in $records: conf_mutant FAILED on this device"
run list --config "$tmp/bug.ini" --plugin conf_mutant > "$tmp/listbug" 2>&1
has "$tmp/listbug" "  check: FAILED $today: "
has "$tmp/listbug" "does not count as checked"
run explain --config "$tmp/bug.ini" --model "$tmp/model.ini" > "$tmp/explainbug" 2>&1 || true
has "$tmp/explainbug" "not_checked: check = failed on this device on $today"
# The correct configuration's record stands.
run list --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/list2" 2>&1
has "$tmp/list2" "  check: checked $today: $passed passed, "

# The file replaced (an upgrade): not checked here any more.
cp "$so" "$tmp/plugins/conf_mutant.so.new" && mv "$tmp/plugins/conf_mutant.so.new" "$tmp/plugins/conf_mutant.so"
run list --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/list3" 2>&1
has "$tmp/list3" "  check: not checked here"
run explain --config "$tmp/req.ini" --model "$tmp/model.ini" > "$tmp/explain3" 2>&1 || true
has "$tmp/explain3" "the plugin file changed since its check on $today"

# A corrupt file: a warning, then ignored.
printf 'garbage' > "$records"
run list --config "$tmp/plain.ini" --plugin conf_mutant > "$tmp/list4" 2>&1
has "$tmp/list4" "check records $records ignored: not a check-record file"
has "$tmp/list4" "  check: not checked here"
echo "check records: OK"
