#!/usr/bin/env bash
# Boot benchmark (npm run bench:boot): the RUN path of a parked instance started for a job,
# through the installed systemd hook, against the loopback IMDSv2 and moto of the bats
# sandbox; and, interleaved in the same run, one bare `aws ssm get-parameter` with the same
# credentials path (IMDS) and endpoint. Times are from the hook's start to the runner
# binary's start (the runner shim records it), medians of RUNS runs.
#
# Counts, at the IMDS server and at the AWS proxy, the requests made before the runner
# started. Last line: overhead-ratio=<RUN median / bare median> aws-calls=<n> imds-requests=<m>
# (the counts are the largest seen in any run). Goal: ratio <= 1.5, 1 AWS call, <= 6 IMDS.
set -euo pipefail
RUNS=${RUNS:-7}
BATS_TEST_DIRNAME=$(cd "$(dirname "$0")/../../test/templates" && pwd)
# shellcheck disable=SC1091 # the bats sandbox: servers, shims, rendering
source "$BATS_TEST_DIRNAME/helpers.bash"

trap sandbox_stop EXIT
sandbox_start >/dev/null

# shellcheck disable=SC1091 # ms_between and median, shared by the boot benchmarks
source "$(dirname "$0")/timing.bash"
# before FIELD STARTED: requests in the sandbox log (ms) logged before STARTED (s).
before() {
  ctl GET /log | grep -oE "\"t\":[0-9.]+,\"$1\"" | cut -d: -f2 | cut -d, -f1 |
    awk -v s="$2" '$1 / 1000 < s' | wc -l
}

run_ms=() bare_ms=() aws_calls=0 imds_requests=0 status=0
echo "boot benchmark: $RUNS runs, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
for ((i = 1; i <= RUNS; i++)); do
  # A parked instance: first boot primes it and installs the hook.
  sandbox_reset
  new_instance "$(warm_tags)"
  boot_first github
  [[ $status == 0 ]] || { cat "$ROOT/out" >&2; exit 1; }
  # Scale-up activates it: config parameter, activation tags; then it boots through the hook.
  github_config "jit-bench-$i"
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 3)\",\"$TAG_TRACE\":\"bench-$i\"")"
  ctl POST /log/reset >/dev/null
  t0=$(date +%s.%N)
  boot_hook
  [[ $status == 0 ]] || { cat "$ROOT/out" >&2; exit 1; }
  started=$(cat "$ROOT/calls/runner.started")
  run_ms+=("$(ms_between "$t0" "$started")")
  n=$(before action "$started") && ((n > aws_calls)) && aws_calls=$n
  n=$(before method "$started") && ((n > imds_requests)) && imds_requests=$n

  # The bare call: same CLI, same credentials path, same endpoint, a parameter that exists.
  github_config "jit-bare-$i"
  t0=$(date +%s.%N)
  boot_env env AWS_EC2_METADATA_SERVICE_ENDPOINT="$IMDS_URL" "$AWS_CLI_BIN" --endpoint-url "$AWS_URL" \
    --region us-east-1 ssm get-parameter --name "$CONFIG_ROOT$INSTANCE_ID" --with-decryption \
    --query Parameter.Value --output text >/dev/null
  t1=$(date +%s.%N)
  bare_ms+=("$(ms_between "$t0" "$t1")")
  echo "run $i: RUN path ${run_ms[-1]} ms, bare get-parameter ${bare_ms[-1]} ms"
done

run_median=$(printf '%s\n' "${run_ms[@]}" | median)
bare_median=$(printf '%s\n' "${bare_ms[@]}" | median)
echo "RUN path median ${run_median} ms, bare aws ssm get-parameter median ${bare_median} ms"
echo "before the runner started: ${aws_calls} AWS call(s) at the proxy, ${imds_requests} IMDS request(s) (the aws CLI's credential fetch included)"
echo "overhead-ratio=$(awk -v r="$run_median" -v b="$bare_median" 'BEGIN { printf "%.2f", r / b }') aws-calls=$aws_calls imds-requests=$imds_requests"
