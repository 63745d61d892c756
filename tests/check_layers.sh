#!/bin/sh
# Checks that src/ keeps its layers: every file sits in a layer's directory,
# includes no header of a layer above its own, and calls nothing defined in
# a layer above its own; and that no files call each other in a cycle.
#
#   tests/check_layers.sh SRC_DIR LIBDLOCK_A
#
# The layers, from the bottom up, are those of DLOCK_LAYERS in
# CMakeLists.txt (docs/layout.md says what each holds). Calls are read from
# the static library with nm: an undefined symbol of one object defined in
# another is a call (or a use of a variable) from the first to the second.
# The generated script table (dlock_scripts.c) belongs to proto.
#
# Exit status: 0 when the layout holds, 1 with every breach listed, 2 on
# bad usage.
set -eu

LAYERS="base proto net link topo sub lock engine api"

# Pairs of files of one layer that may call each other, as "a:b". The
# transports: net.c hands a TLS socket's I/O to tls.c, which does its
# socket work with net.c's calls.
ALLOWED_CYCLES="net/net.c:net/tls.c"

if [ $# -ne 2 ] || [ ! -d "$1" ] || [ ! -f "$2" ]; then
  echo "usage: $0 SRC_DIR LIBDLOCK_A" >&2
  exit 2
fi
src=$1
lib=$2
NM=${NM:-nm}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# rank of each layer: base 0, proto 1, ...
rank=0
: >"$tmp/ranks"
for layer in $LAYERS; do
  echo "$layer $rank" >>"$tmp/ranks"
  rank=$((rank + 1))
done

fail=0
breach() {
  echo "check_layers: $*"
  fail=1
}

# Every C file is in a layer's directory: file path (relative to src/),
# layer, and file name, one line each.
: >"$tmp/files"
for f in $(cd "$src" && find . -name '*.[ch]' | sed 's|^\./||' | sort); do
  layer=${f%%/*}
  if [ "$layer" = "$f" ] || ! grep -q "^$layer " "$tmp/ranks"; then
    breach "src/$f is in no layer's directory ($LAYERS)"
    continue
  fi
  echo "$f $layer ${f##*/}" >>"$tmp/files"
done
# File names are unique, since headers are included by name alone and
# the library's members are named after their sources.
awk '{print $3}' "$tmp/files" | sort | uniq -d | while read -r dup; do
  echo "check_layers: more than one file named $dup under src/"
done | tee "$tmp/dups"
[ -s "$tmp/dups" ] && fail=1

# Includes: '#include "x"' names a file by its name alone, or by its path
# from src/ or from the including file's directory. Headers that are not
# the library's own (dlock.h, hiredis, system) are not looked at.
while read -r f layer name; do
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
    "$src/$f" | while read -r inc; do
    target=""
    case $inc in
    */*)
      if [ -f "$src/${f%/*}/$inc" ]; then
        target=$(cd "$src/${f%/*}/${inc%/*}" && pwd -P)/${inc##*/}
      elif [ -f "$src/$inc" ]; then
        target=$(cd "$src/${inc%/*}" && pwd -P)/${inc##*/}
      fi
      if [ -n "$target" ]; then
        root=$(cd "$src" && pwd -P)
        target=${target#"$root"/}
      fi
      ;;
    *)
      target=$(awk -v n="$inc" '$3 == n {print $1; exit}' "$tmp/files")
      ;;
    esac
    [ -n "$target" ] || continue
    tlayer=${target%%/*}
    r1=$(awk -v l="$layer" '$1 == l {print $2}' "$tmp/ranks")
    r2=$(awk -v l="$tlayer" '$1 == l {print $2}' "$tmp/ranks")
    [ -n "$r2" ] || continue
    if [ "$r2" -gt "$r1" ]; then
      echo "check_layers: src/$f ($layer) includes $inc, which is in $tlayer, a layer above"
    fi
  done
done <"$tmp/files" >"$tmp/incs"
if [ -s "$tmp/incs" ]; then
  cat "$tmp/incs"
  fail=1
fi

# Calls, from nm on the static library: "member symbol" lines for the
# symbols each member defines and for those it leaves undefined.
"$NM" -A -g --defined-only "$lib" 2>/dev/null |
  awk '{n = split($1, p, ":"); m = p[n - 1]; print m, $NF}' |
  sort -u >"$tmp/defs"
"$NM" -A -u "$lib" 2>/dev/null |
  awk '{n = split($1, p, ":"); m = p[n - 1]; print m, $NF}' |
  sort -u >"$tmp/undefs"
if [ ! -s "$tmp/defs" ]; then
  echo "check_layers: $NM found no symbols in $lib" >&2
  exit 2
fi
# member (foo.c.o) -> file path and layer
awk '{print $3 ".o", $1, $2}' "$tmp/files" >"$tmp/members"
echo "dlock_scripts.c.o generated/dlock_scripts.c proto" >>"$tmp/members"
awk '
  FILENAME == ARGV[1] { path[$1] = $2; layer[$1] = $3; next }
  FILENAME == ARGV[2] { rank[$1] = $2; next }
  FILENAME == ARGV[3] { if (!($2 in def)) def[$2] = $1; next }
  {
    m = $1; s = $2
    if (!(s in def) || def[s] == m) next
    if (!(m in path) || !(def[s] in path)) {
      printf "unknown member %s or %s\n", m, def[s]
      next
    }
    print path[m], layer[m], rank[layer[m]], path[def[s]], layer[def[s]],
          rank[layer[def[s]]], s
  }' "$tmp/members" "$tmp/ranks" "$tmp/defs" "$tmp/undefs" >"$tmp/edges"
if grep -q '^unknown member' "$tmp/edges"; then
  grep '^unknown member' "$tmp/edges" | sed 's/^/check_layers: /'
  fail=1
fi
grep -v '^unknown member' "$tmp/edges" | awk '
  $3 < $6 {
    up[$1 " (" $2 ") calls " $4 " (" $5 "), a layer above:"] = \
      up[$1 " (" $2 ") calls " $4 " (" $5 "), a layer above:"] " " $7
  }
  END { for (k in up) print "check_layers: " k up[k] }' | sort >"$tmp/up"
if [ -s "$tmp/up" ]; then
  cat "$tmp/up"
  fail=1
fi

# Cycles between files: the transitive closure of the call graph (a few
# dozen files), and every pair that reaches each other.
grep -v '^unknown member' "$tmp/edges" | awk '{print $1, $4}' | sort -u |
  awk '
  { if (!($1 in id)) { id[$1] = n; name[n++] = $1 }
    if (!($2 in id)) { id[$2] = n; name[n++] = $2 }
    r[id[$1], id[$2]] = 1 }
  END {
    for (k = 0; k < n; k++)
      for (i = 0; i < n; i++)
        if ((i, k) in r)
          for (j = 0; j < n; j++)
            if ((k, j) in r) r[i, j] = 1
    for (i = 0; i < n; i++)
      for (j = i + 1; j < n; j++)
        if ((i, j) in r && (j, i) in r)
          print "check_layers: " name[i] " and " name[j] " call each other (directly or through others)"
  }' | sort >"$tmp/cycles.all"
: >"$tmp/cycles"
while read -r line; do
  allowed=0
  for pair in $ALLOWED_CYCLES; do
    a=${pair%%:*}
    b=${pair#*:}
    case $line in
    *" $a and $b call"* | *" $b and $a call"*) allowed=1 ;;
    esac
  done
  [ $allowed -eq 1 ] || echo "$line" >>"$tmp/cycles"
done <"$tmp/cycles.all"
if [ -s "$tmp/cycles" ]; then
  cat "$tmp/cycles"
  fail=1
fi

if [ $fail -eq 0 ]; then
  nfiles=$(wc -l <"$tmp/files")
  nedges=$(awk '{print $1, $4}' "$tmp/edges" | sort -u | wc -l)
  echo "check_layers: $nfiles files in layers $LAYERS; $nedges calls between files, all downward or within a layer, no cycle"
fi
exit $fail
