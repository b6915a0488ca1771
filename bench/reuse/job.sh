#!/usr/bin/env bash
# The reuse benchmark's CI job (bench/reuse/run.sh): restores its dependencies into the cache
# directory, as a dependency-cache step of a real job does, then uses them. Cold cache: it
# downloads the archive from the loopback server, checks its SHA-256, unpacks it and marks
# the tree complete; warm cache: the tree is there with the same digest, nothing is fetched.
#
#   CACHE_DIR=DIR DEPS_URL=URL DEPS_SHA256=HEX job.sh
#
# Prints one line: `cache=hit|miss files=N bytes=M`.
set -euo pipefail
: "${CACHE_DIR:?} ${DEPS_URL:?} ${DEPS_SHA256:?}"
deps=$CACHE_DIR/deps
# The digest is written last, after the move: a tree without it (a job cut off while
# unpacking) is a miss, never a half-filled hit.
stamp=$deps/.complete

if [[ -f $stamp && $(<"$stamp") == "$DEPS_SHA256" ]]; then
  cache=hit
else
  cache=miss
  rm -rf "$deps"
  work=$(mktemp -d "$CACHE_DIR/.deps.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  curl -fsS --noproxy '*' --max-time 120 -o "$work/deps.tar.gz" "$DEPS_URL"
  got=$(sha256sum "$work/deps.tar.gz" | cut -d' ' -f1)
  [[ $got == "$DEPS_SHA256" ]] || { echo "SHA-256 of $DEPS_URL is $got, expected $DEPS_SHA256" >&2 && exit 1; }
  mkdir "$work/tree"
  tar -xzf "$work/deps.tar.gz" -C "$work/tree"
  mv "$work/tree" "$deps"
  printf '%s\n' "$DEPS_SHA256" >"$stamp"
fi
# The job's use of its dependencies: every file's size, read from the tree.
read -r files bytes < <(find "$deps" -type f ! -name .complete -printf '%s\n' | awk '{ n++; b += $1 } END { print n + 0, b + 0 }')
echo "cache=$cache files=$files bytes=$bytes"
