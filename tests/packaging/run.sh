#!/bin/sh
# Install tests of the Debian packages (issue 29), run by scripts/test.sh:
#   sh tests/packaging/run.sh [package build dir, default build-deb]
#
# 1. build the packages (scripts/package.sh: cpack -G DEB);
# 2. check their metadata with dpkg-deb --info/--contents (names, Depends,
#    Provides, file lists, conffiles, triggers, no maintainer scripts) and
#    run lintian when it is installed;
# 3. unpack them (dpkg-deb -x) into a throw-away root, never touching this
#    machine's dpkg database, and run the binaries from there: `attnhost
#    list` finds exactly the plugin packages unpacked, `attnhost run` passes
#    with cpu-amx alone, Python finds the host, `attnhost doctor` names the
#    CPU package and no GPU package, the vendor example built with pkg-config
#    against libattnhost-dev is found once dropped into the plugin
#    directory, a plugin of ABI 1 is rejected naming both versions, and
#    deleting a plugin package's files takes it out of `list`;
# 4. with ATTNHOST_PACKAGING_CHROOT=1 (scripts/test.sh sets it), the real
#    thing: apt-get install ./*.deb in a debootstrap minbase chroot of
#    bookworm (downloads ~100 MB; about a minute), the same checks, then
#    apt-get remove of the plugin package; skipped when the mirror is unreachable.
# Skips (exit 0, with a message) when not root or without dpkg-deb.
set -eu
cd "$(dirname "$0")/../.."
src=$(pwd)
if [ "$(id -u)" != 0 ]; then echo "packaging tests: SKIPPED (not root)"; exit 0; fi
for t in dpkg-deb cpack pkg-config python3; do
  command -v "$t" >/dev/null || { echo "packaging tests: SKIPPED ($t missing)"; exit 0; }
done
bdir=${1:-build-deb}
t0=$(date +%s)
fail() { echo "packaging tests: FAILED: $*" >&2; exit 1; }
ok() { echo "  ok: $*"; }

echo "packaging tests: building the packages into $bdir/packages"
sh scripts/package.sh "$bdir" -DATTNHOST_PLUGINS=cpu_amx >/dev/null
pk=$src/$bdir/packages
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
abi=$(sed -n 's/^#define AH_ABI_VERSION_MAJOR \([0-9]*\)$/\1/p' plugin_api/attnhost/plugin.h)
lib=libattnhost$abi
deb() { ls "$pk"/"$1"_*.deb 2>/dev/null | head -1; }
for p in "$lib" libattnhost-dev attnhost python3-attnhost attnhost-plugin-cpu-amx; do
  [ -n "$(deb "$p")" ] || fail "no package $p in $pk"
done
ok "packages: $(cd "$pk" && ls *.deb | tr '\n' ' ')"

# --- 2. metadata ---------------------------------------------------------
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
files() { dpkg-deb -c "$(deb "$1")" | awk '{print $6}' | sed 's|^\./|/|'; }
has() { files "$1" | grep -qx "$2" || fail "$1 lacks $2"; }
ctrl() { dpkg-deb --ctrl-tarfile "$(deb "$1")" | tar t | sed 's|^\./||' | grep -v '^$'; }
L=/usr/lib/$triplet
has "$lib" "$L/libattnhost.so.$abi"
has libattnhost-dev "$L/libattnhost.so"
for f in /usr/include/attnhost/attnhost.h /usr/include/attnhost/plugin.h /usr/include/attnhost/plugin_util.h \
         "$L/pkgconfig/attnhost.pc" "$L/pkgconfig/attnhost-plugin.pc" "$L/cmake/attnhost/attnhostConfig.cmake"; do
  has libattnhost-dev "$f"
done
for f in /usr/bin/attnhost /usr/libexec/attnhost/attnhost-plugin-scanner /etc/attnhost/attnhost.ini \
         /usr/share/attnhost/models/llama-3-8b.ini /usr/share/man/man1/attnhost.1.gz; do
  has attnhost "$f"
done
has python3-attnhost /usr/lib/python3/dist-packages/attnhost/__init__.py
! files python3-attnhost | grep -q __pycache__ || fail "python3-attnhost ships __pycache__"
[ "$(field python3-attnhost Architecture)" = all ] || fail "python3-attnhost is not Architecture: all"
dpkg-deb --ctrl-tarfile "$(deb "$lib")" | tar xO ./shlibs | grep -qx "libattnhost $abi $lib (>= .*)" ||
  fail "$lib: no shlibs line for libattnhost.so.$abi"
dpkg-deb --ctrl-tarfile "$(deb "$lib")" | tar xO ./triggers | grep -qx "activate-noawait ldconfig" ||
  fail "$lib: no ldconfig trigger"
dpkg-deb --ctrl-tarfile "$(deb attnhost)" | tar xO ./conffiles | grep -qx /etc/attnhost/attnhost.ini ||
  fail "attnhost: the INI is not a conffile"
field attnhost Depends | grep -q "$lib (= " || fail "attnhost does not depend on $lib"
field libattnhost-dev Depends | grep -q "$lib (= " || fail "libattnhost-dev does not depend on $lib"
plugin_pkgs=$(cd "$pk" && ls attnhost-plugin-*.deb | sed 's/_.*//')
for p in $(cd "$pk" && ls *.deb | sed 's/_.*//'); do
  if ctrl "$p" | grep -Eq '^(preinst|postinst|prerm|postrm|config)$'; then fail "$p has maintainer scripts"; fi
  [ -n "$(field "$p" Section)" ] && [ "$(field "$p" Priority)" = optional ] || fail "$p: Section/Priority"
  files "$p" | grep -qx "/usr/share/doc/$p/copyright" || fail "$p has no copyright file"
done
for p in $plugin_pkgs; do
  field "$p" Provides | grep -qx attnhost-plugin || fail "$p does not provide attnhost-plugin"
  field "$p" Depends | grep -q "$lib (>= " || fail "$p does not depend on $lib (>= ...)"
  if field "$p" Depends | grep -Eq 'libcuda|libamdhip|libze|opencl'; then fail "$p depends on a GPU runtime"; fi
  files "$p" | grep -v '/$' | grep -v "^/usr/share/doc/$p/" | grep -qv "^$L/attnhost/plugins/[^/]*\.so$" &&
    fail "$p ships files outside the plugin directory"
done
ok "metadata: names, Depends, Provides, file lists, conffiles, ldconfig trigger, no maintainer scripts"
if command -v lintian >/dev/null; then
  # initial-upload-closes-no-bugs: these packages are not uploaded to Debian (no ITP bug)
  lint=$(lintian --suppress-tags initial-upload-closes-no-bugs "$pk"/*.deb 2>&1 | grep -E '^[EW]: ' || true)
  [ -z "$lint" ] || fail "lintian:
$lint"
  ok "lintian: no errors or warnings"
else
  echo "  lintian not installed: its check skipped"
fi

# --- 3. an unpacked root ---------------------------------------------------
work=$(mktemp -d /tmp/attnhost-pkgtest.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
for d in "$pk"/*.deb; do dpkg-deb -x "$d" "$root"; done
export LD_LIBRARY_PATH="$root$L" XDG_CACHE_HOME="$work/cache"
unset ATTNHOST_PLUGIN_PATH ATTNHOST_LIB || true
[ -d "$L/attnhost/plugins" ] && echo "  note: this machine has $L/attnhost/plugins; the host searches it too"
ah() { "$root/usr/bin/attnhost" "$@" --config "$root/etc/attnhost/attnhost.ini"; }
names() { ah list --json | python3 -c 'import json,sys; print(" ".join(sorted(p["name"] for p in json.load(sys.stdin)["plugins"])))'; }
"$root/usr/bin/attnhost" --version | grep -q "plugin ABI $abi\." || fail "attnhost --version"

# the plugins `list` finds are exactly those the plugin packages ship
want=$(for p in $plugin_pkgs; do files "$p" | sed -n 's|.*/attnhost/plugins/\(.*\)\.so$|\1|p'; done | sort | tr '\n' ' ' | sed 's/ $//')
got=$(names)
[ "$got" = "$want" ] || fail "list found '$got', the packages ship '$want'"
ah list >"$work/list.txt" 2>&1
grep -q "$root$L/attnhost/plugins/cpu_amx.so" "$work/list.txt" || fail "cpu_amx not found in the unpacked plugin directory"
if grep -qi "scanner" "$work/list.txt"; then fail "the packaged scanner was not used: $(grep -i scanner "$work/list.txt")"; fi
ok "attnhost list finds exactly the packaged plugins ($got), scanned by the packaged scanner"

ah run >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "attnhost run"; }
ok "attnhost run passes with cpu-amx alone ($(grep -ci 'cpu_amx' "$work/run.txt") lines name cpu_amx)"

PYTHONPATH="$root/usr/lib/python3/dist-packages" ATTNHOST_LIB="$root$L/libattnhost.so.$abi" python3 -c '
import attnhost, sys
h = attnhost.Host(sys.argv[1])
names = sorted(p.name for p in h.plugins())
assert names == sys.argv[2].split(), names
print("  ok: python3-attnhost: Host() from the unpacked package finds", names)' \
  "$root/etc/attnhost/attnhost.ini" "$want" || fail "python3-attnhost"

doctor_check() { # $1: packages doctor must propose to install ("" none)
  ah doctor --json >"$work/doctor.json" || fail "attnhost doctor --json"
  python3 - "$work/doctor.json" "$1" <<'PY' || fail "attnhost doctor: $(cat "$work/doctor.json")"
import json, sys
d = json.load(open(sys.argv[1]))
want_install = sys.argv[2].split()
assert "attnhost-plugin-cpu-amx" in d["fit"], d["fit"]
if not d["gpus"]:
    gpu = [p for p in d["fit"] + [m["package"] for m in d["may_fit"]] if p != "attnhost-plugin-cpu-amx"]
    assert not gpu, "GPU packages proposed on a machine without a GPU: %s" % gpu
else:
    print("  note: this machine has GPUs; doctor's GPU packages not checked")
assert d["install"] == want_install, (d["install"], want_install)
PY
}
doctor_check ""
ah doctor | grep -q "attnhost-plugin-cpu-amx *installed" || fail "attnhost doctor text"
ok "attnhost doctor names attnhost-plugin-cpu-amx and no GPU package"

# the vendor example, built with pkg-config against the unpacked -dev package
pcdir="$root$L/pkgconfig"
cp -r examples/vendor_plugin "$work/vendor"
PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$pcdir" make -s -C "$work/vendor" acme_attn.so >/dev/null ||
  fail "building the vendor example with pkg-config"
plugdir="$root$(PKG_CONFIG_LIBDIR="$pcdir" pkg-config --variable=plugindir attnhost-plugin)"
[ "$plugdir" = "$root$L/attnhost/plugins" ] || fail "attnhost-plugin.pc plugindir is $plugdir"
install -m 0644 "$work/vendor/acme_attn.so" "$plugdir/"
[ "$(names)" = "$(echo acme_attn $want | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')" ] ||
  fail "after dropping acme_attn.so: $(names)"
ah list --plugin acme_attn | grep -q 'acme_attn 1.0.0 (Acme Corp, cpu) \[available\]' || fail "acme_attn not available"
ok "the vendor example built with pkg-config against libattnhost-dev is found in the plugin directory"

# the same example packaged by a vendor with CPack against the unpacked -dev package
cmake -S examples/vendor_plugin -B "$work/vendor-build" -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/vendor-build" >/dev/null
(cd "$work/vendor-build" && cpack -G DEB >/dev/null 2>&1)
vdeb=$(ls "$work"/vendor-build/attnhost-plugin-acme_*.deb)
dpkg-deb -f "$vdeb" Provides | grep -qx attnhost-plugin || fail "attnhost-plugin-acme: Provides"
dpkg-deb -f "$vdeb" Depends | grep -q "$lib (>= " || fail "attnhost-plugin-acme: Depends"
dpkg-deb -c "$vdeb" | grep -q "\./usr/lib/$triplet/attnhost/plugins/acme_attn.so$" || fail "attnhost-plugin-acme: file list"
if command -v lintian >/dev/null; then
  lint=$(lintian --suppress-tags initial-upload-closes-no-bugs "$vdeb" 2>&1 | grep -E '^[EW]: ' || true)
  [ -z "$lint" ] || fail "lintian on the vendor package: $lint"
fi
rm -f "$plugdir/acme_attn.so"
dpkg-deb -x "$vdeb" "$root"
ah list --plugin acme_attn | grep -q 'acme_attn 1.0.0 (Acme Corp, cpu) \[available\]' || fail "packaged acme_attn not available"
ok "the vendor example packaged with CPack (attnhost-plugin-acme) is lintian-clean and found once unpacked"

# a plugin of ABI major 1, rejected with both versions named
PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$pcdir" sh -c \
  'cc -std=c11 -fPIC -shared -fvisibility=hidden $(pkg-config --cflags attnhost-plugin) -o "$1" "$2"' \
  sh "$plugdir/old_abi1.so" tests/packaging/abi1_plugin.c
chmod 0644 "$plugdir/old_abi1.so"
ah list --json | python3 -c '
import json, re, sys
p = [p for p in json.load(sys.stdin)["plugins"] if p["path"].endswith("/old_abi1.so")]
assert p and p[0]["state"] == "rejected", p
assert re.search(r"ABI 1\.1.*ABI 2\.\d", p[0]["reason"]), p[0]["reason"]
print("  ok: a plugin of ABI 1 is rejected:", p[0]["reason"])' || fail "the ABI 1 plugin"
rm -f "$plugdir/old_abi1.so" "$plugdir/acme_attn.so"

# removing a plugin package (its files) removes it from list; doctor proposes it again
for f in $(files attnhost-plugin-cpu-amx | grep -v '/$'); do rm -f "$root$f"; done
[ -z "$(names)" ] || fail "after removing attnhost-plugin-cpu-amx, list still finds $(names)"
doctor_check attnhost-plugin-cpu-amx
ok "removing attnhost-plugin-cpu-amx's files removes cpu_amx from list; doctor proposes it"
echo "packaging tests (unpacked root): passed in $(( $(date +%s) - t0 )) s"

# --- 4. apt-get in a bookworm chroot (opt-in) ------------------------------
if [ "${ATTNHOST_PACKAGING_CHROOT:-0}" = 1 ]; then
  t1=$(date +%s)
  command -v debootstrap >/dev/null || fail "ATTNHOST_PACKAGING_CHROOT=1 needs debootstrap"
  ch=$work/chroot
  # no mirror (no network) is a skip, not a failure of the packages
  if ! debootstrap --variant=minbase bookworm "$ch" "${ATTNHOST_DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
      >"$work/debootstrap.log" 2>&1; then
    tail -5 "$work/debootstrap.log"
    echo "packaging tests (bookworm chroot): SKIPPED: debootstrap failed (no mirror?)"
    exit 0
  fi
  t2=$(date +%s)
  mkdir -p "$ch/debs" && cp "$pk"/*.deb "$ch/debs/"
  mount -t proc proc "$ch/proc"
  trap 'umount "$ch/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
  inch() { chroot "$ch" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive "$@"; }
  inch apt-get update -qq
  inch sh -c 'apt-get install -y -qq /debs/*.deb' >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; fail "apt-get install"; }
  inch attnhost list | grep -q '^cpu_amx .*\[available\]' || fail "chroot: attnhost list"
  inch attnhost run >/dev/null || fail "chroot: attnhost run"
  inch python3 -c 'import attnhost; print([p.name for p in attnhost.Host().plugins()])' | grep -q cpu_amx ||
    fail "chroot: python3-attnhost"
  inch attnhost doctor | grep -q "attnhost-plugin-cpu-amx *installed" || fail "chroot: attnhost doctor"
  inch man -w attnhost >/dev/null 2>&1 || inch test -f /usr/share/man/man1/attnhost.1.gz || fail "chroot: man page"
  inch apt-get remove -y -qq attnhost-plugin-cpu-amx >/dev/null
  inch attnhost list | grep -q "no plugins found" || fail "chroot: cpu_amx still listed after apt-get remove"
  inch attnhost doctor | grep -q "apt-get install attnhost-plugin-cpu-amx" || fail "chroot: doctor after remove"
  umount "$ch/proc"
  echo "packaging tests (bookworm chroot): passed: debootstrap $((t2 - t1)) s, install and checks $(( $(date +%s) - t2 )) s"
fi
