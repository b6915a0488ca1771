#!/usr/bin/env bash
# Install benchmark (npm run bench:install): the cold start of a stock image, which installs
# the runner before RUN, against the cold start of an image that has it, in the bats sandbox
# (loopback IMDSv2, moto, the loopback release server and its small real packages). Times are
# from the user data's start to the runner binary's start (the runner shim records it),
# medians of RUNS runs of each, interleaved; and the install step's own time within the stock
# boots, from its log lines.
#
# What the sandbox cannot show: the real package's download (227,660,598 bytes for GitHub
# 2.338.0 x64), its unpacking, and dnf (a shim here). docs/performance.md models those as an
# estimate. Last line: install-ratio=<stock median / prebuilt median>.
set -euo pipefail
RUNS=${RUNS:-5}
BATS_TEST_DIRNAME=$(cd "$(dirname "$0")/../../test/templates" && pwd)
# shellcheck disable=SC1091 # the bats sandbox: servers, shims, rendering
source "$BATS_TEST_DIRNAME/helpers.bash"

trap sandbox_stop EXIT
sandbox_start >/dev/null

# shellcheck disable=SC1091 # ms_between and median, shared by the boot benchmarks
source "$(dirname "$0")/timing.bash"

# line_ms TEXT: the time (ms since the epoch) of the boot output's first line holding TEXT.
line_ms() {
  local t
  t=$(grep -m1 -F -- "$1" "$ROOT/out" | cut -d' ' -f1)
  printf '%s' "$(($(date -u -d "${t%.*}" +%s) * 1000 + 10#$(printf '%s' "${t#*.}" | tr -dc 0-9)))"
}

# cold_start KIND: one cold launch (prebuilt or stock), prints ms to the runner's start; for a
# stock one also the install step's own time, from its log lines, in INSTALL_MS.
cold_start() {
  sandbox_reset
  [[ $1 == prebuilt ]] || stock_machine
  new_instance "$(cold_tags)"
  github_config "jit-bench-$1"
  local t0
  t0=$(date +%s.%N)
  boot_first github
  [[ $status == 0 ]] || { cat "$ROOT/out" >&2 && exit 1; }
  if [[ $1 == stock ]]; then
    grep -qF 'installed the github runner' "$ROOT/out" || { echo 'the stock run installed nothing' >&2 && exit 1; }
    echo $(($(line_ms 'installed the github runner') - $(line_ms 'installing the github runner'))) >>"$INSTALL_LOG"
  fi
  ms_between "$t0" "$(cat "$ROOT/calls/runner.started")"
}

prebuilt=() stock=() status=0
INSTALL_LOG=$(mktemp)
echo "install benchmark: $RUNS runs each, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "sandbox package: $(stat -c %s "$ROOT/release/github-x64.tar.gz") bytes (GitHub tarball)"
for ((i = 1; i <= RUNS; i++)); do
  prebuilt+=("$(cold_start prebuilt)")
  stock+=("$(cold_start stock)")
  echo "run $i: prebuilt ${prebuilt[-1]} ms, stock (install then RUN) ${stock[-1]} ms"
done
p=$(printf '%s\n' "${prebuilt[@]}" | median)
s=$(printf '%s\n' "${stock[@]}" | median)
echo "cold start to runner start: prebuilt median ${p} ms, stock median ${s} ms"
echo "install step alone (its log lines, 'installing' to 'installed'): median $(median <"$INSTALL_LOG") ms"
rm -f "$INSTALL_LOG"
echo "install-ratio=$(awk -v s="$s" -v p="$p" 'BEGIN { printf "%.2f", s / p }')"
