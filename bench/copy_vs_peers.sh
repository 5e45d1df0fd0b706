#!/bin/bash
# `coffer copy` against `restic copy` and `rustic copy` on the same small data, local
# repositories: a first copy,
# then a second after a backup in which 1% of the data changed. Prints wall time (without
# tracing) and the bytes each tool read from the source repository (a second, traced run:
# strace -ff -y, summing read, pread64, readv and preadv results, and the lengths of mmap
# calls, on file descriptors under the source repository, one trace file per thread so that
# no call is split).
# The coffer destination is made with `init --from-repo` (objects copy byte for byte), restic's
# with `init --copy-chunker-params` (blobs copy, packs are rewritten), rustic's by `copy --init`
# into a target named by a profile file (blobs copy; the first copy's time includes the init).
# restic and rustic keep a local cache (index, snapshots, trees) whose reads are not reads of
# the source repository; NO_CACHE=1 runs them with --no-cache (coffer keeps no cache of local
# repositories).
# Usage: COFFER=target/release/coffer RESTIC=~/.cache/coffer-bench/restic \
#   RUSTIC=~/.cache/coffer-bench/rustic/bin/rustic [NO_CACHE=1] bash bench/copy_vs_peers.sh [FILES]
set -e
B=${COFFER:-target/release/coffer}
R=${RESTIC:-$HOME/.cache/coffer-bench/restic}
U=${RUSTIC:-$HOME/.cache/coffer-bench/rustic/bin/rustic}
if [ "${NO_CACHE:-0}" = 1 ]; then R="$R --no-cache"; U="$U --no-cache"; fi
FILES=${1:-50}
W=$(mktemp -d /tmp/copy-vs-restic.XXXX)
trap 'rm -rf "$W"' EXIT
export COFFER_PASSWORD=pw COFFER_FROM_PASSWORD=pw RESTIC_PASSWORD=pw RESTIC_FROM_PASSWORD=pw RUSTIC_PASSWORD=pw
export HOME=$W/home
mkdir -p "$W/data"
for i in $(seq 1 "$FILES"); do head -c 819200 /dev/urandom > "$W/data/f$i"; done

# Bytes read from files under $1 by the command after it (traced).
src_reads() {
  local src=$1; shift
  rm -f "$W"/trace.*
  strace -ff -y -qq -e trace=read,pread64,readv,preadv,preadv2,mmap -o "$W/trace" "$@" >/dev/null 2>&1
  # Reads count what they returned; a file mapped into memory (rustic maps pack files)
  # counts its mapped length, an upper bound of what is read from it.
  cat "$W"/trace.* | awk -v s="$src/" 'index($0, "<" s) {
      if ($0 ~ /^mmap\(/) { split($0, a, ", "); t += a[2] }
      else { n = $NF; if (n ~ /^[0-9]+$/) t += n } } END { print t + 0 }'
}
wall() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }

run() {
  local tool=$1 step=$2
  for traced in no yes; do
    rm -rf "$W/$tool-src" "$W/$tool-dst"
    if [ "$tool" = coffer ]; then
      $B --repo "$W/$tool-src" init -q --kdf-log-n 10 --insecure-kdf >/dev/null
      $B --repo "$W/$tool-src" backup -q "$W/data"
      $B --repo "$W/$tool-dst" init -q --kdf-log-n 10 --insecure-kdf --from-repo "$W/$tool-src" >/dev/null
      cmd=($B --repo "$W/$tool-dst" copy -q --from-repo "$W/$tool-src")
    elif [ "$tool" = restic ]; then
      $R -q -r "$W/$tool-src" init >/dev/null
      $R -q -r "$W/$tool-src" backup "$W/data" >/dev/null
      $R -q -r "$W/$tool-dst" init --from-repo "$W/$tool-src" --copy-chunker-params >/dev/null
      cmd=($R -q -r "$W/$tool-dst" copy --from-repo "$W/$tool-src")
    else
      $U -r "$W/$tool-src" init >/dev/null 2>&1
      $U -r "$W/$tool-src" backup "$W/data" >/dev/null 2>&1
      printf '[repository]\nrepository = "%s"\npassword = "pw"\n' "$W/$tool-dst" >"$W/rustic-target.toml"
      # rustic copies only into a repository with the source's chunker parameters,
      # which `copy --init` gives the target it creates.
      cmd=($U -r "$W/$tool-src" copy --init --target "$W/rustic-target")
    fi
    if [ "$step" = second ]; then
      "${cmd[@]}" >/dev/null 2>&1
      cp "$W/data/f1" "$W/f1.bak"; head -c 819200 /dev/urandom > "$W/data/f1"
      case $tool in
        coffer) $B --repo "$W/$tool-src" backup -q "$W/data" ;;
        restic) $R -q -r "$W/$tool-src" backup "$W/data" >/dev/null ;;
        rustic) $U -r "$W/$tool-src" backup "$W/data" >/dev/null 2>&1 ;;
      esac
      mv "$W/f1.bak" "$W/data/f1"
    fi
    if [ $traced = no ]; then t=$(wall "${cmd[@]}"); else b=$(src_reads "$W/$tool-src" "${cmd[@]}"); fi
  done
  echo "$tool $step copy: ${t} s wall, ${b} bytes read from the source"
}
for step in first second; do run coffer $step; run restic $step; run rustic $step; done
