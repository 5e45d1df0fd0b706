#!/bin/bash
# `coffer copy` against `restic copy` on the same small data, local repositories: a first copy,
# then a second after a backup in which 1% of the data changed. Prints wall time (without
# tracing) and the bytes each tool read from the source repository (a second, traced run:
# strace -ff -y, summing read, pread64, readv and preadv results on file descriptors under the
# source repository, one trace file per thread so that no call is split).
# The coffer destination is made with `init --from-repo` (objects copy byte for byte), restic's
# with `init --copy-chunker-params` (blobs copy, packs are rewritten).
# Usage: COFFER=target/release/coffer RESTIC=~/.cache/coffer-bench/restic bash bench/copy_vs_restic.sh [FILES]
set -e
B=${COFFER:-target/release/coffer}
R=${RESTIC:-$HOME/.cache/coffer-bench/restic}
FILES=${1:-50}
W=$(mktemp -d /tmp/copy-vs-restic.XXXX)
trap 'rm -rf "$W"' EXIT
export COFFER_PASSWORD=pw COFFER_FROM_PASSWORD=pw RESTIC_PASSWORD=pw RESTIC_FROM_PASSWORD=pw HOME=$W/home
mkdir -p "$W/data"
for i in $(seq 1 "$FILES"); do head -c 819200 /dev/urandom > "$W/data/f$i"; done

# Bytes read from files under $1 by the command after it (traced).
src_reads() {
  local src=$1; shift
  rm -f "$W"/trace.*
  strace -ff -y -qq -e trace=read,pread64,readv,preadv,preadv2 -o "$W/trace" "$@" >/dev/null 2>&1
  cat "$W"/trace.* | awk -v s="$src/" 'index($0, "<" s) { n = $NF; if (n ~ /^[0-9]+$/) t += n } END { print t + 0 }'
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
    else
      $R -q -r "$W/$tool-src" init >/dev/null
      $R -q -r "$W/$tool-src" backup "$W/data" >/dev/null
      $R -q -r "$W/$tool-dst" init --from-repo "$W/$tool-src" --copy-chunker-params >/dev/null
      cmd=($R -q -r "$W/$tool-dst" copy --from-repo "$W/$tool-src")
    fi
    if [ "$step" = second ]; then
      "${cmd[@]}" >/dev/null 2>&1
      cp "$W/data/f1" "$W/f1.bak"; head -c 819200 /dev/urandom > "$W/data/f1"
      if [ "$tool" = coffer ]; then $B --repo "$W/$tool-src" backup -q "$W/data"
      else $R -q -r "$W/$tool-src" backup "$W/data" >/dev/null; fi
      mv "$W/f1.bak" "$W/data/f1"
    fi
    if [ $traced = no ]; then t=$(wall "${cmd[@]}"); else b=$(src_reads "$W/$tool-src" "${cmd[@]}"); fi
  done
  echo "$tool $step copy: ${t} s wall, ${b} bytes read from the source"
}
for step in first second; do run coffer $step; run restic $step; done
