#!/bin/sh
# docs/configuration.md embeds `attnhost config --plugin-keys-markdown`:
# every plugin of this build must have its block there, verbatim, between
# <!-- plugin-keys:NAME --> and <!-- /plugin-keys:NAME -->. Blocks of
# plugins this build lacks (the CUDA plugins where there is no nvcc) are
# left alone, so a CPU-only build checks only its own plugins.
# Usage: plugin_keys_doc.sh ATTNHOST DOC [--update]
#   --update writes this build's blocks into DOC (in place, or a new one
#   before <!-- plugin-keys:end -->) instead of checking.
set -eu
ah=$1 doc=$2 mode=${3:-check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ah" config --plugin-keys-markdown --no-cache > "$tmp/md"
names=$(sed -n 's/^<!-- plugin-keys:\([a-z0-9_]*\) -->$/\1/p' "$tmp/md")
[ -n "$names" ] || { echo "no plugin in this build declares keys: nothing to check"; exit 0; }
grep -q '^<!-- plugin-keys:end -->$' "$doc" || { echo "$doc: no <!-- plugin-keys:end --> marker"; exit 1; }
block() { sed -n "/^<!-- plugin-keys:$1 -->\$/,/^<!-- \/plugin-keys:$1 -->\$/p" "$2"; }
fail=0
for n in $names; do
    block "$n" "$tmp/md" > "$tmp/want"
    block "$n" "$doc" > "$tmp/have"
    if [ "$mode" = --update ]; then
        awk -v n="$n" -v want="$tmp/want" '
            function put() { while ((getline l < want) > 0) print l; close(want); done = 1 }
            $0 == "<!-- plugin-keys:" n " -->" { skip = 1; put(); next }
            skip { if ($0 == "<!-- /plugin-keys:" n " -->") skip = 0; next }
            $0 == "<!-- plugin-keys:end -->" && !done { put(); print ""; }
            { print }' "$doc" > "$tmp/doc" && cat "$tmp/doc" > "$doc"
        echo "[plugin.$n]: written into $doc"
    elif ! cmp -s "$tmp/want" "$tmp/have"; then
        echo "$doc: the keys of [plugin.$n] differ from what the plugin declares:"
        diff "$tmp/have" "$tmp/want" || true
        fail=1
    else
        echo "[plugin.$n]: $doc matches the declared keys"
    fi
done
[ $fail = 0 ] || echo "regenerate with: sh tests/cli/plugin_keys_doc.sh build/bin/attnhost docs/configuration.md --update"
exit $fail
