#!/usr/bin/env bash
# Reuse benchmark (npm run bench:reuse): what a warm cache saves a job. The job (job.sh)
# restores a dependency archive of about 40 MB (generated here: random and base64 files) into
# its cache directory from the loopback server when the cache lacks it, then uses the files.
# It runs on the boot sandbox's job path: a cold launch's real boot script (RUN, loopback
# IMDSv2, moto) starts the runner, which here is runner.sh running the job as the runner user.
#
# Each of RUNS rounds: a fresh machine with an empty cache directory (cold cache), then a
# fresh machine given the cache directory the first one left (warm cache: what a reusable
# instance keeps when it parks, carried over by this script). Medians of the job's own time
# (runner.sh's stamps) and of boot start to job end. The server is the sandbox's loopback
# release server on 127.0.0.1, started and stopped with the sandbox.
#
# Last line: reuse-ratio=<cold job median / warm job median> boot-ratio=<the same, boot start
# to job end> archive-bytes=<n> downloads-cold=<n> downloads-warm=<n>.
set -euo pipefail
RUNS=${RUNS:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
BATS_TEST_DIRNAME=$(cd "$HERE/../../test/templates" && pwd)
# shellcheck disable=SC1091 # the bats sandbox: servers, shims, rendering
source "$BATS_TEST_DIRNAME/helpers.bash"

trap sandbox_stop EXIT
sandbox_start >/dev/null

# shellcheck disable=SC1091 # ms_between and median, shared by the benchmarks
source "$HERE/../boot/timing.bash"

# make_deps ARCHIVE: about 40 MB of tar.gz: 160 files of 100 KiB random bytes (gzip cannot
# shrink them, like compressed packages) and 160 of 150 KiB random bytes in base64 (text that
# gzip shrinks by about a quarter, like sources).
make_deps() {
  local tree i
  tree=$(mktemp -d "$ROOT/deps-tree.XXXXXX")
  mkdir -p "$tree/deps/bin" "$tree/deps/src"
  for ((i = 1; i <= 160; i++)); do
    head -c 102400 /dev/urandom >"$tree/deps/bin/blob-$i.bin"
    head -c 153600 /dev/urandom | base64 >"$tree/deps/src/file-$i.txt"
  done
  tar -czf "$1" -C "$tree" deps
  rm -rf "$tree"
}

CACHE=$ROOT/var/cache/ci
KEPT=$ROOT/kept-cache
DEPS=$ROOT/release/deps.tar.gz
make_deps "$DEPS"
DEPS_SHA256=$(sha256sum "$DEPS" | cut -d' ' -f1)
ARCHIVE_BYTES=$(stat -c %s "$DEPS")

# job_run: one cold launch whose runner runs the job against $CACHE; prints "JOB_MS BOOT_MS".
job_run() {
  new_instance "$(cold_tags)"
  install -m 755 "$HERE/runner.sh" "$ROOT/runner/github/run.sh"
  install -m 644 "$HERE/job.sh" "$ROOT/job.sh"
  printf 'CACHE_DIR=%s\nDEPS_URL=%s\nDEPS_SHA256=%s\n' "$CACHE" "$RELEASE_URL/deps.tar.gz" "$DEPS_SHA256" >"$ROOT/calls/job.env"
  github_config "jit-bench-reuse"
  local t0 start end
  t0=$(date +%s.%N)
  boot_first github
  [[ -f $ROOT/calls/job.times ]] || { cat "$ROOT/out" >&2 && echo 'the runner never ran the job' >&2 && exit 1; }
  read -r start end <"$ROOT/calls/job.times"
  printf '%s %s\n' "$(ms_between "$start" "$end")" "$(ms_between "$t0" "$end")"
}

# expect_job CACHE: the job succeeded with that cache outcome and found every file.
expect_job() {
  grep -qx "cache=$1 files=320 bytes=[0-9]*" "$ROOT/calls/job.out" || {
    echo "expected a cache $1 of 320 files, the job said:" >&2 && cat "$ROOT/calls/job.out" "$ROOT/out" >&2 && exit 1
  }
}

cold_job=() warm_job=() cold_boot=() warm_boot=() downloads_cold=0 downloads_warm=0
echo "reuse benchmark: $RUNS rounds, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "dependency archive: $ARCHIVE_BYTES bytes (320 files), served by the loopback release server at $RELEASE_URL"
for ((i = 1; i <= RUNS; i++)); do
  # Cold cache: a fresh machine, its cache directory empty and the runner user's.
  sandbox_reset
  rm -rf "$KEPT"
  install -d -m 755 -o "$RUNNER_USER" "$CACHE"
  read -r job boot < <(job_run)
  expect_job miss
  downloads_cold=$((downloads_cold + $(release_requests | grep -c 'deps.tar.gz' || true)))
  cold_job+=("$job") cold_boot+=("$boot")
  # Warm cache: a fresh machine with the cache directory the cold one left.
  mv "$CACHE" "$KEPT"
  sandbox_reset
  mkdir -p "$(dirname "$CACHE")"
  mv "$KEPT" "$CACHE"
  read -r job boot < <(job_run)
  expect_job hit
  downloads_warm=$((downloads_warm + $(release_requests | grep -c 'deps.tar.gz' || true)))
  warm_job+=("$job") warm_boot+=("$boot")
  echo "round $i: job cold ${cold_job[-1]} ms, warm ${warm_job[-1]} ms; boot start to job end cold ${cold_boot[-1]} ms, warm ${warm_boot[-1]} ms"
done

cj=$(printf '%s\n' "${cold_job[@]}" | median)
wj=$(printf '%s\n' "${warm_job[@]}" | median)
cb=$(printf '%s\n' "${cold_boot[@]}" | median)
wb=$(printf '%s\n' "${warm_boot[@]}" | median)
echo "job median: cold cache ${cj} ms, warm cache ${wj} ms"
echo "boot start to job end median: cold cache ${cb} ms, warm cache ${wb} ms"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "reuse-ratio=$(ratio "$cj" "$wj") boot-ratio=$(ratio "$cb" "$wb") archive-bytes=$ARCHIVE_BYTES downloads-cold=$downloads_cold downloads-warm=$downloads_warm"
