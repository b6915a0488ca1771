#!/usr/bin/env bats
# The boot script ships its own log to CloudWatch Logs (no agent on the AMI): the fleet's boot
# log group in moto, one stream per instance, read back with the aws CLI. Shipping is best
# effort: a missing group, throttling or a hung endpoint must neither fail nor block a boot.

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() {
  sandbox_reset
  # A test may have deleted the group (moto keeps its state for the whole file).
  moto_aws logs create-log-group --log-group-name "$LOG_GROUP" 2>/dev/null || true
}
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

LOG=var/log/start-runner.log
# activate: scale-up's side of a warm activation (config parameter and activation tags).
activate() {
  github_config "$1"
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 4)\",\"$TAG_TRACE\":\"$2\"")"
}

@test "PRIME ships every line it wrote to the instance's stream before powering off" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  called shutdown "-h now"
  [ "$(logs_actions)" = $'Logs_20140328.CreateLogStream\nLogs_20140328.PutLogEvents' ]
  # Exactly the file's lines, in order: the last one is the power-off notice.
  diff <(log_messages) "$ROOT/$LOG"
  log_messages | tail -n 1 | grep -qF "primed; powering off"
}

@test "each event carries its line's own time, to the millisecond" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  local ts message
  IFS=$'\t' read -r ts message < <(moto_aws logs get-log-events --log-group-name "$LOG_GROUP" \
    --log-stream-name "$INSTANCE_ID" --start-from-head --query 'events[0].[timestamp,message]' --output text)
  [[ $message =~ ^([0-9-]{10}T[0-9:]{8}\.[0-9]{3})Z\ start-runner\[ ]]
  [ "$ts" = "$(date -u -d "${BASH_REMATCH[1]}" +%s%3N)" ]
}

@test "RUN ships the activation latency line right after the runner started; a later boot sends only new lines" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-logs trace-logs
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  # The stream exists from the PRIME: no second CreateLogStream.
  refute grep -qx Logs_20140328.CreateLogStream < <(logs_actions)
  local started first_put
  started=$(cat "$ROOT/calls/runner.started")
  first_put=$(aws_times Logs_20140328.PutLogEvents | head -n 1)
  # Shipping waits for the runner's start, never the other way round.
  awk -v s="$started" -v p="$first_put" 'BEGIN { exit !(p / 1000 > s) }'
  log_messages | grep -qE "$LOG_TRACE=trace-logs $LOG_LATENCY=[0-9]+\.[0-9]{3}$"
  # The runner config's value (the JIT config) never reaches CloudWatch.
  refute grep -qF jit-logs < <(log_messages)
  # Every line of both boots once, in order (the PRIME's lines were not sent again).
  diff <(log_messages) "$ROOT/$LOG"
  [ "$(log_messages | grep -c "$LOG_MODE=PRIME")" -eq 1 ]
  log_messages | tail -n 1 | grep -qF "terminating $INSTANCE_ID"
}

@test "the latency line reaches CloudWatch while the job still runs" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-long-job trace-long
  # The job lasts until the test ends it (a safety bound far beyond the wait below).
  scaled_seconds 600 >"$ROOT/calls/runner-hold"
  boot_background "$ROOT/usr/local/sbin/start-runner"
  # Until the line is in the stream (each look is an aws CLI call; a safety bound of 120 s
  # times the slowdown).
  local end
  end=$((SECONDS + $(scaled_seconds 120)))
  until log_messages | grep -qF "$LOG_LATENCY=" || ((SECONDS > end)); do sleep 0.2; done
  log_messages | grep -qF "$LOG_LATENCY="
  # The job has not ended: the runner is held, nothing was terminated.
  refute grep -qF "runner exited" "$ROOT/out"
  [ "$(instance_state)" = running ]
  rm "$ROOT/calls/runner-hold"
  boot_wait
  [ "$status" -eq 0 ]
  log_messages | tail -n 1 | grep -qF "terminating $INSTANCE_ID"
}

@test "RUN ships the job's ledger: boot began, runner started, job taken, each with the trace id, pool and seconds since activation" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-ledger trace-ledger
  printf '2026-12-01 12:00:00Z: Listening for Jobs\n2026-12-01 12:00:01Z: %sbuild\n' "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  boot_hook
  [ "$status" -eq 0 ]
  local -A secs=()
  local stages=() line re
  re="^[0-9T:.-]+Z start-runner\[[0-9]+\]: $LOG_TRACE=trace-ledger $LEDGER_POOL=pool-a $LEDGER_STAGE=([a-z-]+) $LEDGER_SECONDS=([0-9]+\.[0-9]{3})$"
  while IFS= read -r line; do
    [[ $line == *"$LEDGER_STAGE="* ]] || continue
    [[ $line =~ $re ]]
    stages+=("${BASH_REMATCH[1]}") secs[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  done < <(log_messages)
  # The contract's instance stages, once each, as CloudWatch received them (a quick job's line
  # may come before the others: each carries its own seconds).
  [ "$(printf '%s\n' "${stages[@]}" | sort | tr '\n' ' ')" = "$(printf '%s\n' $INSTANCE_STAGES | sort | tr '\n' ' ')" ]
  # Measured from the activation tag (4.25 s before the boot), in the order they happened.
  local boot=${secs[boot-began]} run=${secs[runner-started]} job=${secs[job-taken]}
  awk -v a="$boot" -v b="$run" -v c="$job" 'BEGIN { exit !(a >= 3.75 && a <= b && b <= c) }'
  # Runner started is the activation latency: one moment, one value.
  log_messages | grep -qE "$LOG_LATENCY=$run$"
}

@test "RUN reads the pool tag from IMDS once: the job watcher takes the value the boot read, and the job-taken line carries it" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-pool trace-pool
  # The job is taken after the boot's own ledger lines read the pool (as a real job comes).
  echo "$ROOT/var/lib/warm-runners/pool" >"$ROOT/calls/runner-say-after"
  printf '2026-12-01 12:00:01Z: %sbuild\n' "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  boot_hook
  [ "$status" -eq 0 ]
  log_messages | grep -qE " $LEDGER_POOL=pool-a $LEDGER_STAGE=job-taken "
  [ "$(imds_paths | grep -cxF "/latest/meta-data/tags/instance/$TAG_POOL")" -eq 1 ]
}

@test "an empty pool tag is read once as unresolved: no line carries the instance id or an empty pool; the pool file is written whole" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  github_config jit-empty
  # IMDS answers 200 with an empty body for a tag whose value is empty.
  set_tags "$(printf '{"%s":"","%s":"%s","%s":"%s","%s":"trace-empty"}' "$TAG_POOL" "$TAG_WARM" "$WARM_VALUE" "$TAG_ACTIVATED" "$(iso_ago 4)" "$TAG_TRACE")"
  echo "$ROOT/var/lib/warm-runners/pool" >"$ROOT/calls/runner-say-after"
  printf '2026-12-01 12:00:01Z: %sbuild\n' "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  boot_hook
  [ "$status" -eq 0 ]
  for stage in boot-began runner-started job-taken; do
    log_messages | grep -qE " $LEDGER_POOL=unresolved $LEDGER_STAGE=$stage "
  done
  ! log_messages | grep -qE " $LEDGER_POOL=(i-[0-9a-f]+)? "
  [ "$(imds_paths | grep -cxF "/latest/meta-data/tags/instance/$TAG_POOL")" -eq 1 ]
  # Written through a temporary file and mv: the file whole, no temporary left behind.
  [ "$(cat "$ROOT/var/lib/warm-runners/pool")" = "$INSTANCE_ID unresolved" ]
  [ -z "$(find "$ROOT/var/lib/warm-runners" -name 'pool.*')" ]
}

@test "a pool file left by another instance (image baked after a RUN) is not taken: the pool is read from IMDS" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-stale trace-stale
  echo "i-0aaaaaaaaaaaaaaaa pool-z" >"$ROOT/var/lib/warm-runners/pool"
  boot_hook
  [ "$status" -eq 0 ]
  log_messages | grep -qE " $LEDGER_POOL=pool-a $LEDGER_STAGE=boot-began "
  ! log_messages | grep -qF "pool-z"
}

@test "WAIT giving up ships its lines before the instance terminates itself" {
  new_instance "$(cold_tags)"
  # The rendering with a short WAIT bound (scaled with the machine's slowdown).
  boot "$ROOT/user-data-github-short-wait.sh"
  [ "$status" -ne 0 ]
  log_messages | grep -qF "error: no runner config at $CONFIG_ROOT$INSTANCE_ID after ${SHORT_WAIT_SECONDS}s"
  log_messages | tail -n 1 | grep -qF "terminating $INSTANCE_ID"
  # Shipped first, then terminated.
  local put terminate
  put=$(aws_times Logs_20140328.PutLogEvents | tail -n 1)
  terminate=$(aws_times EC2.TerminateInstances | head -n 1)
  awk -v p="$put" -v t="$terminate" 'BEGIN { exit !(p < t) }'
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a missing log group fails no boot; the lines stay for a later boot" {
  moto_aws logs delete-log-group --log-group-name "$LOG_GROUP"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  called shutdown "-h now"
  grep -qF "warning: boot log not (fully) shipped to $LOG_GROUP" "$ROOT/out"
  grep -qF "ResourceNotFoundException" "$ROOT/out"
  # A missing group is a final answer: one call, no retries, no PutLogEvents.
  [ "$(logs_actions)" = Logs_20140328.CreateLogStream ]
  # The group is back (deployed) by the time the parked instance is activated.
  moto_aws logs create-log-group --log-group-name "$LOG_GROUP"
  activate jit-late-group trace-late
  boot_hook
  [ "$status" -eq 0 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-late-group ]
  # The PRIME's lines (and its warnings) arrived with the RUN's.
  log_messages | grep -qF "$LOG_MODE=PRIME"
  log_messages | grep -qF "$LOG_LATENCY="
  diff <(log_messages) "$ROOT/$LOG"
}

@test "throttled PutLogEvents is retried within the bound, then given up without failing the boot" {
  new_instance "$(warm_tags)"
  ctl POST /throttle '{"action":"Logs_20140328.PutLogEvents","count":100}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  called shutdown "-h now"
  grep -qF "ThrottlingException" "$ROOT/out"
  grep -qF "warning: boot log not (fully) shipped" "$ROOT/out"
  [ "$(logs_actions | grep -c PutLogEvents)" -ge 2 ]
  refute grep -qF "error:" "$ROOT/out"
}

@test "a PutLogEvents that never answers is cut at the shipping bound; the boot goes on" {
  new_instance "$(cold_tags)"
  github_config jit-hung-logs
  ctl POST /hang '{"action":"Logs_20140328.PutLogEvents","count":100}' >/dev/null
  # The rendering with a short shipping bound (scaled with the machine's slowdown) and a CLI
  # read timeout far beyond it: only the bound can stop the call.
  boot "$ROOT/user-data-github-short-ship.sh"
  [ "$status" -eq 0 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-hung-logs ]
  grep -qF "stopped at the log shipping bound" "$ROOT/out"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a disk cloned from another instance does not ship that instance's lines" {
  new_instance "$(cold_tags)"
  mkdir -p "$ROOT/var/lib/warm-runners" "$ROOT/var/log"
  echo "2026-01-01T00:00:00.000Z start-runner[1]: line of i-0aaaaaaaaaaaaaaaa" >"$ROOT/$LOG"
  echo "i-0aaaaaaaaaaaaaaaa 0" >"$ROOT/var/lib/warm-runners/log-sent"
  github_config jit-clone
  boot_first github
  [ "$status" -eq 0 ]
  log_messages | grep -qF "$LOG_MODE=RUN"
  refute grep -qF "line of i-0aaaaaaaaaaaaaaaa" < <(log_messages)
  diff <(log_messages) <(tail -n +2 "$ROOT/$LOG")
}

@test "a batch CloudWatch refuses as invalid is dropped after one call, not retried at every shipping" {
  new_instance "$(warm_tags)"
  ctl POST /throttle '{"action":"Logs_20140328.PutLogEvents","count":1,"error":"InvalidParameterException"}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  called shutdown "-h now"
  # One call: a refusal of the batch itself fails the same way however often it is sent.
  [ "$(logs_actions | grep -c PutLogEvents)" -eq 1 ]
  grep -qF "warning: CloudWatch Logs refused" "$ROOT/out"
  activate jit-refused trace-refused
  boot_hook
  [ "$status" -eq 0 ]
  # The RUN's lines (and the PRIME's warning) arrive; the refused PRIME batch is not sent again.
  log_messages | grep -qF "warning: CloudWatch Logs refused"
  log_messages | grep -qF "$LOG_LATENCY="
  refute grep -qF "$LOG_MODE=PRIME" < <(log_messages)
  log_messages | tail -n 1 | grep -qF "terminating $INSTANCE_ID"
}

@test "the boot log's final answers stay the boot log's: a ResourceNotFoundException from SSM is no 'no config'" {
  new_instance "$(cold_tags)"
  github_config jit-not-log
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":1,"error":"ResourceNotFoundException"}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  # Retried and read, never taken for a missing parameter (WAIT).
  refute grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-not-log ]
}

@test "lines JSON or CloudWatch would choke on arrive (quotes, backslashes, control and non-UTF-8 bytes); empty lines are left out" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  local t
  t=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  {
    printf '%s start-runner[1]: "quoted" back\\slash {"a":1}\n' "$t"
    printf '\n'
    printf '%s start-runner[1]: ctl \001\033[0m tab\there cr\r\n' "$t"
    printf '%s start-runner[1]: utf8 \303\251 bad \377\376\n' "$t"
  } >>"$ROOT/$LOG"
  activate jit-hostile trace-hostile
  boot_hook
  [ "$status" -eq 0 ]
  refute grep -qE "sending [0-9]+ log lines|refused" "$ROOT/out"
  # Byte for byte but for the bytes JSON cannot carry as they are (each one a "?"), in order.
  # Delivery is at least once: a put-log-events that timed out on a loaded machine after moto
  # took it is sent again, so repeats of a line are folded (the offset tests keep exactness).
  diff <(log_messages | sed 's/\\"/"/g; s/\\\\/\\/g' | awk '!seen[$0]++') <(grep -av '^$' "$ROOT/$LOG" | LC_ALL=C sed 's/[^[:print:]]/?/g')
  log_messages | grep -qF "$LOG_LATENCY="
}

@test "NUL bytes in the log file (a crash can leave them) neither shift the offset nor repeat lines" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  local t
  t=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  { printf '%s start-runner[1]: before the NULs\n' "$t"; head -c 300 /dev/zero; printf '%s start-runner[1]: after the NULs\n' "$t"; } >>"$ROOT/$LOG"
  activate jit-nul trace-nul
  boot_hook
  [ "$status" -eq 0 ]
  # Two shippings (after the start, before terminating): each line once, the NULs as "?".
  diff <(log_messages) <(tr '\0' '?' <"$ROOT/$LOG")
}

@test "times stay within PutLogEvents' rules: a clock stepped back repeats the previous time, a batch spans under 24 hours, lines 20 days old do not arrive" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  local ago
  ago() { date -u -d "@$(($(date +%s) - $1))" +%Y-%m-%dT%H:%M:%S.000Z; }
  {
    printf '%s start-runner[1]: twenty days old\n' "$(ago $((20 * 86400)))"
    printf '%s start-runner[1]: thirty hours old\n' "$(ago $((30 * 3600)))"
    printf '%s start-runner[1]: a minute old\n' "$(ago 60)"
    printf '%s start-runner[1]: clock stepped back\n' "$(ago 120)"
  } >>"$ROOT/$LOG"
  activate jit-times trace-times
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  refute grep -qF "twenty days old" < <(log_messages)
  log_messages | grep -qF "thirty hours old"
  log_messages | grep -qF "clock stepped back"
  # The thirty-hour-old line and the recent ones cannot share a batch.
  [ "$(logs_actions | grep -c PutLogEvents)" -ge 3 ]
  # Event times never decrease within the stream.
  moto_aws logs get-log-events --log-group-name "$LOG_GROUP" --log-stream-name "$INSTANCE_ID" --start-from-head \
    --query 'events[].timestamp' --output text | tr '\t' '\n' | sort -c -n
}

@test "a reboot after a RUN ships why it starts nothing" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  activate jit-reboot trace-reboot
  boot_hook
  [ "$status" -eq 0 ]
  boot_hook
  [ "$status" -eq 0 ]
  [ "$(wc -l <"$ROOT/calls/runner")" -eq 1 ]
  log_messages | tail -n 1 | grep -qF "a RUN began on an earlier boot: not starting again"
  diff <(log_messages) "$ROOT/$LOG"
}
