#!/usr/bin/env bats
# The rendered boot script in a sandbox: real curl against a loopback IMDSv2, the real aws
# CLI (credentials from that IMDS) against moto, shims only for systemctl, shutdown, the
# runner binaries and BSD date. One scenario of issue 2 per test, named after it.

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

@test "cold RUN: reads the config, starts the runner, deletes the parameter, terminates itself" {
  new_instance "$(cold_tags)"
  github_config jit-cold-run
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN instance=$INSTANCE_ID" "$ROOT/out"
  [ "$(calls_of runner)" = "$ROOT/runner/github/run.sh" ]
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # A cold instance installs no hook and never powers off.
  [ ! -e "$ROOT/usr/local/sbin/start-runner" ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "cold RUN runs the prepare commands after the install step, before the runner starts, once" {
  new_instance "$(cold_tags)"
  # A disk cloned from a prepared instance (an image baked from a primed one) carries its mark.
  mkdir -p "$ROOT/var/lib/warm-runners"
  echo i-0123456789abcdef0 >"$ROOT/var/lib/warm-runners/prepared"
  github_config jit-cold-prepare
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  # In order: the mode, both prepare commands, then the runner.
  [ "$(grep -oE "$LOG_MODE=RUN|prepare command [0-9]/2|starting the github runner" "$ROOT/out" | tr '\n' ' ')" = \
    "$LOG_MODE=RUN prepare command 1/2 prepare command 2/2 starting the github runner " ]
  [ "$(cat "$ROOT/var/lib/warm-runners/prepared")" = "$INSTANCE_ID" ]
}

@test "a cold RUN whose prepare command fails never starts the runner, deletes its config and terminates with start-failure" {
  new_instance "$(cold_tags)"
  touch "$ROOT/fail-prepare"
  github_config jit-cold-prepare-fails
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "error: prepare command 2 failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  # The config (a secret) is deleted on the way out, as after a failed install.
  refute param_exists
  moto_tags | grep -qx "$TAG_START_FAILURE=RUN failed: prepare command 2 failed"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "cold WAIT prepares before its bound, and the RUN it turns into does not prepare again" {
  new_instance "$(cold_tags)"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "polling up to"
  wait_for_log "prepare command 2/2"
  github_config jit-wait-prepared
  boot_wait
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  [ "$(grep -c "prepare command 1/2" "$ROOT/out")" -eq 1 ]
}

@test "the aws CLI gets its credentials from the IMDS role, the EC2 way" {
  new_instance "$(cold_tags)"
  github_config jit-credentials
  boot_first github
  [ "$status" -eq 0 ]
  imds_paths | grep -qx '/latest/meta-data/iam/security-credentials/runner-instance-role'
  # Every call reached moto signed with the key IMDS handed out, none with any other.
  [ "$(ctl GET /log | grep -oE '"accessKeyId":"[^"]*"' | sort -u)" = '"accessKeyId":"ASIAIMDSSANDBOX00001"' ]
}

@test "cold WAIT then RUN when the parameter appears" {
  new_instance "$(cold_tags)"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "$LOG_MODE=WAIT"
  github_config jit-after-wait
  boot_wait
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-after-wait ]
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "WAIT timing out fails and the cold instance terminates itself" {
  new_instance "$(cold_tags)"
  # The rendering with a short WAIT bound (scaled with the machine's slowdown).
  boot "$ROOT/user-data-github-short-wait.sh"
  [ "$status" -ne 0 ]
  grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  local line polls reads first ended
  line=$(grep -F "no runner config at $CONFIG_ROOT$INSTANCE_ID after ${SHORT_WAIT_SECONDS}s (" "$ROOT/out")
  [[ $line =~ \(([0-9]+)\ polls\) ]]
  polls=${BASH_REMATCH[1]}
  # It polled: one read to choose the mode, then one per poll (ParameterNotFound is final).
  # On a loaded machine the poll running at the bound is cut, before or after its request
  # reached the proxy, so the count of reads is within one of polls + 1.
  reads=$(aws_actions | grep -c AmazonSSM.GetParameter)
  [ "$polls" -ge 2 ]
  [ "$reads" -ge "$polls" ]
  [ "$reads" -le $((polls + 2)) ]
  # ... and for its whole bound, never less: from the read that chose WAIT to the termination
  # at least the bound less a second (SECONDS counts whole seconds).
  first=$(aws_times AmazonSSM.GetParameter | head -n 1)
  ended=$(aws_times EC2.TerminateInstances | head -n 1)
  awk -v a="$first" -v b="$ended" -v w="$SHORT_WAIT_SECONDS" 'BEGIN { exit !(b - a >= (w - 1) * 1000) }'
  [ ! -e "$ROOT/calls/runner" ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # The reason the pool's back-off counts, tagged before the termination.
  moto_tags | grep -qE "^$TAG_START_FAILURE=WAIT failed: no runner config at $CONFIG_ROOT$INSTANCE_ID after ${SHORT_WAIT_SECONDS}s [0-9]+ polls$"
  [ "$(aws_actions | grep -xE 'EC2.(CreateTags|TerminateInstances)' | tr '\n' ' ')" = 'EC2.CreateTags EC2.TerminateInstances ' ]
}

@test "a cold instance whose failure tag cannot be written still terminates itself" {
  new_instance "$(launch_tags cold)"
  ctl POST /param "{\"name\":\"$CONFIG_ROOT$INSTANCE_ID\",\"value\":\"version=99\\nprovider=github\\ninstance=$INSTANCE_ID\\njitconfig=x\\n\"}" >/dev/null
  ctl POST /throttle '{"action":"EC2.CreateTags","count":100}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "warning: $TAG_START_FAILURE not tagged" "$ROOT/out"
  moto_tags | refute grep -qF "$TAG_START_FAILURE="
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a started cold runner stopped from outside (SIGTERM) is no start failure" {
  new_instance "$(cold_tags)"
  github_config jit-reclaimed
  # A job that runs until the script is stopped (scale-down reclaiming it, a spot interruption).
  scaled_seconds 60 >"$ROOT/calls/runner-hold"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "starting the github runner"
  local bound=$(($(scaled_seconds 60) * 10)) n=0
  while [[ ! -e $ROOT/calls/runner.started ]] && ((n++ < bound)); do sleep 0.1; done
  term_boot
  boot_wait
  rm -f "$ROOT/calls/runner-hold"
  [ "$status" -eq 143 ]
  grep -qF "failed (status 143) in RUN: terminating" "$ROOT/out"
  moto_tags | refute grep -qF "$TAG_START_FAILURE="
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a cold instance stopped from outside while it waits for its config is no start failure" {
  new_instance "$(cold_tags)"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "$LOG_MODE=WAIT"
  term_boot
  boot_wait
  [ "$status" -eq 143 ]
  grep -qF "failed (status 143) in WAIT: terminating" "$ROOT/out"
  moto_tags | refute grep -qF "$TAG_START_FAILURE="
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "cold failure self-terminates (a config the script cannot use)" {
  new_instance "$(cold_tags)"
  ctl POST /param "{\"name\":\"$CONFIG_ROOT$INSTANCE_ID\",\"value\":\"version=99\\nprovider=github\\ninstance=$INSTANCE_ID\\njitconfig=x\\n\"}" >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "is not version 1" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  # The unusable config is a secret all the same: deleted on the way out.
  refute param_exists
  grep -qF "deleted $CONFIG_ROOT$INSTANCE_ID" "$ROOT/out"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "warm PRIME installs and enables the hook and powers off without terminating and without reading or deleting any config" {
  new_instance "$(warm_tags)"
  # A stale config must be neither read nor deleted by a priming boot.
  github_config jit-stale
  rm "$ROOT/dev/root-volume"
  mkfifo "$ROOT/dev/root-volume"
  # Completes only when the script reads the whole volume through.
  timeout "$(scaled_seconds 30)" bash -c "head -c 3145728 /dev/zero >'$ROOT/dev/root-volume'" &
  local reader=$!
  boot_first github
  [ "$status" -eq 0 ]
  wait "$reader"
  grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  cmp "$ROOT/usr/local/sbin/start-runner" "$ROOT/hook-github.sh"
  [ -x "$ROOT/usr/local/sbin/start-runner" ]
  cmp "$ROOT/etc/systemd/system/$UNIT_NAME" "$ROOT/unit.service"
  called systemctl "enable $UNIT_NAME"
  [ -L "$ROOT/etc/systemd/system/multi-user.target.wants/$UNIT_NAME" ]
  # The pool's prepare commands ran, as root.
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  called shutdown "-h now"
  [ "$(aws_actions)" = '' ]
  param_exists
  [ "$(instance_state)" = running ]
}

@test "a PRIME that systemd signals while shutdown runs is no failed PRIME" {
  new_instance "$(warm_tags)"
  echo term >"$ROOT/calls/shutdown-mode"
  boot_first github
  # Stopped by the SIGTERM (143), and quietly: the PRIME succeeded.
  [ "$status" -eq 143 ]
  called shutdown "-h now"
  grep -qF "primed; powering off" "$ROOT/out"
  refute grep -qF "PRIME failed" "$ROOT/out"
  refute grep -qF "error:" "$ROOT/out"
}

@test "a PRIME whose shutdown fails is a failed PRIME" {
  new_instance "$(warm_tags)"
  echo fail >"$ROOT/calls/shutdown-mode"
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "error: shutdown failed" "$ROOT/out"
  grep -qF "PRIME failed (status 1)" "$ROOT/out"
  [ "$(aws_actions)" = '' ]
  [ "$(instance_state)" = running ]
}

@test "warm standby is decided by the tag's value, not by the key being there" {
  new_instance "$(standby_tags false)"
  github_config jit-not-warm
  boot_first github
  [ "$status" -eq 0 ]
  refute grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-not-warm ]
}

@test "a failing PRIME does not power off" {
  new_instance "$(warm_tags)"
  touch "$ROOT/fail-prepare"
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "prepare command 2 failed" "$ROOT/out"
  grep -qF "PRIME failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [ ! -e "$ROOT/calls/poweroff" ]
  [ "$(aws_actions)" = '' ]
  [ "$(instance_state)" = running ]
}

@test "a PRIME without the runner binary that cannot install it does not power off" {
  new_instance "$(warm_tags)"
  rm "$ROOT/runner/github/run.sh"
  release_mode 404
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "download of $RELEASE_URL/github-x64.tar.gz failed" "$ROOT/out"
  [ ! -e "$ROOT/runner/github/run.sh" ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "the next boot through the hook with a config runs RUN" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  # Scale-up activates the parked instance: config, activation tags, StartInstances.
  github_config jit-through-hook
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\",\"$TAG_TRACE\":\"trace-hook\"")"
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-through-hook ]
  # Prepared while priming: the warm activation does not run the prepare commands again.
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # The hook disabled itself once the RUN began.
  called systemctl "disable --no-reload $UNIT_NAME"
  [ ! -e "$ROOT/etc/systemd/system/multi-user.target.wants/$UNIT_NAME" ]
}

@test "the hook path makes one AWS call and at most 6 IMDS requests before the runner starts" {
  new_instance "$(warm_tags)"
  boot_first github
  github_config jit-counted
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\",\"$TAG_TRACE\":\"trace-count\"")"
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  local started log
  started=$(cat "$ROOT/calls/runner.started")
  log=$(ctl GET /log)
  # Requests logged (in ms) before the runner shim started (in s).
  before() { grep -oE "\"t\":[0-9.]+,\"$1\"" <<<"$log" | cut -d: -f2 | cut -d, -f1 |
    awk -v s="$started" '$1 / 1000 < s' | wc -l; }
  [ "$(before action)" -eq 1 ]
  [ "$(before method)" -le 6 ]
  [ "$(aws_actions | head -n 1)" = AmazonSSM.GetParameter ]
}

@test "a parked instance started with its config but its activation tags not yet visible RUNs instead of parking again" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  github_config jit-tags-late
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(calls_of shutdown | wc -l)" -eq 1 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-tags-late ]
}

@test "an activated instance does not rerun the start logic on a later reboot" {
  new_instance "$(warm_tags)"
  boot_first github
  github_config jit-once
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\"")"
  boot_hook
  [ "$status" -eq 0 ]
  # Whatever systemd does, a second start of the hook must not start a second runner.
  github_config jit-twice
  ctl POST /log/reset >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "a RUN began on an earlier boot" "$ROOT/out"
  [ "$(wc -l <"$ROOT/calls/runner")" -eq 1 ]
  [ "$(aws_actions)" = '' ]
}

@test "a run-began marker left by another instance (image baked after a RUN) is ignored and replaced" {
  new_instance "$(cold_tags)"
  mkdir -p "$ROOT/var/lib/warm-runners"
  echo i-0aaaaaaaaaaaaaaaa >"$ROOT/var/lib/warm-runners/run-began"
  github_config jit-baked
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "ignoring the run-began marker of i-0aaaaaaaaaaaaaaaa" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-baked ]
  [ "$(cut -d" " -f1 "$ROOT/var/lib/warm-runners/run-began")" = "$INSTANCE_ID" ]
}

@test "user data and hook starting together on one boot start exactly one runner" {
  new_instance "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\"")"
  github_config jit-concurrent
  # An image baked from a primed instance: the hook is enabled when cloud-init runs the user
  # data. Both start the start logic at once.
  mkdir -p "$ROOT/usr/local/sbin"
  install -m 755 "$ROOT/hook-github.sh" "$ROOT/usr/local/sbin/start-runner"
  local a b sa=0 sb=0
  boot_env "$ROOT/user-data-github.sh" >"$ROOT/out-a" 2>&1 &
  a=$!
  boot_env "$ROOT/usr/local/sbin/start-runner" >"$ROOT/out-b" 2>&1 &
  b=$!
  wait "$a" || sa=$?
  wait "$b" || sb=$?
  cat "$ROOT/out-a" "$ROOT/out-b" >"$ROOT/out"
  [ "$sa" -eq 0 ]
  [ "$sb" -eq 0 ]
  [ "$(wc -l <"$ROOT/calls/runner")" -eq 1 ]
  [ "$(grep -c "$LOG_MODE=RUN" "$ROOT/out")" -eq 1 ]
  [ "$(grep -c "$ROOT/var/lib/warm-runners/lock is held: another start logic runs" "$ROOT/out")" -eq 1 ]
}

@test "re-priming through the hook does not truncate the hook" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  cp "$ROOT/usr/local/sbin/start-runner" "$ROOT/hook-before"
  # Not activated yet (or activated, then rolled back): the hook primes and parks again,
  # copying its own file ($0) onto itself.
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  [ "$(calls_of shutdown | wc -l)" -eq 2 ]
  cmp "$ROOT/usr/local/sbin/start-runner" "$ROOT/hook-before"
  cmp "$ROOT/usr/local/sbin/start-runner" "$ROOT/hook-github.sh"
}

@test "missing end marker fails loudly and installs no hook" {
  new_instance "$(warm_tags)"
  grep -vxF -- "$END_MARKER" "$ROOT/user-data-github.sh" >"$ROOT/user-data-truncated.sh"
  chmod 755 "$ROOT/user-data-truncated.sh"
  boot "$ROOT/user-data-truncated.sh"
  [ "$status" -ne 0 ]
  grep -qF "end marker missing in $ROOT/user-data-truncated.sh" "$ROOT/out"
  [ ! -e "$ROOT/usr/local/sbin/start-runner" ]
  [ -z "$(find "$ROOT/usr" -type f 2>/dev/null)" ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "warm failure before a mode is chosen is not terminated" {
  new_instance "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\"")"
  github_config jit-unreachable
  # SSM refuses every attempt to read the config: no mode can be chosen.
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "left for the pool to evict" "$ROOT/out"
  refute grep -qF "$LOG_MODE=" "$ROOT/out"
  aws_actions | refute grep -qx EC2.TerminateInstances
  [ "$(instance_state)" = running ]
  [ ! -e "$ROOT/calls/shutdown" ]
  # A warm standby's failure is the pool's to count (priming timeout), not a cold failure.
  moto_tags | refute grep -qF "$TAG_START_FAILURE="
}

@test "activated without config waits (no PRIME), then runs when the config appears" {
  new_instance "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\",\"$TAG_TRACE\":\"trace-late\"")"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "$LOG_MODE=WAIT"
  github_config jit-late
  boot_wait
  [ "$status" -eq 0 ]
  refute grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-late ]
}

@test "trace id in RUN logs and absent in PRIME" {
  # A priming boot runs without a trace id, even one left behind by a rolled-back activation.
  new_instance "$(warm_tags "\"$TAG_TRACE\":\"trace-stale\"")"
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=PRIME" "$ROOT/var/log/start-runner.log"
  refute grep -qF "$LOG_TRACE=" "$ROOT/var/log/start-runner.log"
  refute grep -qF "$LOG_TRACE=" "$ROOT/out"

  new_instance "$(cold_tags "\"$TAG_TRACE\":\"trace-0af3\"")"
  github_config jit-traced
  rm "$ROOT/var/log/start-runner.log"
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/var/log/start-runner.log"
  [ "$(grep -c . "$ROOT/var/log/start-runner.log")" -ge 4 ]
  # Every line of the RUN boot, in the log file and on stderr.
  refute grep -vF "$LOG_TRACE=trace-0af3 " "$ROOT/var/log/start-runner.log"
  grep 'start-runner\[' "$ROOT/out" | refute grep -vF "$LOG_TRACE=trace-0af3 "
}

# latency_boot EPOCH MILLIS [bsd]: a RUN of an activated instance whose activation tag is
# EPOCH.MILLIS; checks the activation time its latency line implies (the line's own time less
# the latency), which must be the tag's to the millisecond, plus the few statements between
# the script reading its clock and writing the line: never earlier (a dropped fraction makes
# it 0.999 s earlier), and less than a second later (a fraction counted twice).
latency_boot() {
  local iso line at latency implied
  iso=$(date -u -d "@$1" +%Y-%m-%dT%H:%M:%S).$2Z
  rm -rf "$ROOT/calls/"* "$ROOT/var/lib"
  new_instance "$(warm_tags "\"$TAG_ACTIVATED\":\"$iso\",\"$TAG_TRACE\":\"trace-latency\"")"
  github_config "jit-latency-$2"
  if [[ -n ${3-} ]]; then EXTRA_PATH=$ROOT/bsd boot_first github; else boot_first github; fi
  [ "$status" -eq 0 ]
  line=$(grep -F "$LOG_LATENCY=" "$ROOT/out")
  [ "$(wc -l <<<"$line")" -eq 1 ]
  [[ $line == *"$LOG_TRACE=trace-latency $LOG_LATENCY="* ]]
  latency=${line##*"$LOG_LATENCY="}
  [[ $latency =~ ^[0-9]+\.[0-9]{3}$ ]]
  at=$(date -u -d "${line%%Z *}Z" +%s%3N)
  implied=$((at - 10#${latency/./}))
  echo "tag $1.$2, line at $at ms, latency $latency s: implied activation $implied ms" >&2
  ((implied >= $1$2 && implied - $1$2 < 1000))
}

@test "the latency line under GNU date counts the milliseconds of the activation tag" {
  local base
  base=$(($(date +%s) - 100))
  # Tags .000 and .999 in the same second: each must be read with its fraction.
  latency_boot "$base" 000
  latency_boot "$base" 999
}

@test "the latency line under BSD date (fractional seconds and trailing Z)" {
  local base
  base=$(($(date +%s) - 100))
  latency_boot "$base" 999 bsd
  # The script really went through the BSD shim, and BSD's strict -f got a string it parses.
  grep -q -- '-j -u -f' "$ROOT/calls/date"
  latency_boot "$base" 000 bsd
}

@test "the config parameter is deleted after read and its planted value is never logged, encoded or not" {
  local secret config core k b64
  # Base64-like, as real JIT configs are, so its URL-encoded form differs from the plain one;
  # the random core survives any URL-encoding or escaping unchanged.
  core=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  secret="jit+$core/planted=="
  new_instance "$(cold_tags "\"$TAG_TRACE\":\"trace-secret\"")"
  github_config "$secret"
  boot_first github
  [ "$status" -eq 0 ]
  refute param_exists
  aws_actions | grep -qx AmazonSSM.DeleteParameter
  # The runner got it, as an argument ...
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = "$secret" ]
  # ... and nowhere else: not in its environment, not in any log, state or temp file.
  config=$(printf 'version=1\nprovider=github\njitconfig=%s\n' "$secret")
  local forms=("$secret" "$(printf %s "$secret" | base64 -w0)" "$(printf %s "$config" | base64 -w0)"
    "$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$secret")"
    "$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$config")")
  # The core inside any base64 stream, whatever its offset: drop the groups it shares.
  for k in 0 1 2; do
    b64=$(printf "%${k}s%s" '' "$core" | base64 -w0)
    forms+=("${b64:4:${#b64}-8}")
  done
  forms+=("$core")
  local form
  for form in "${forms[@]}"; do
    nowhere_in "$form" "$ROOT/out" "$ROOT/var" "$ROOT/etc" "$ROOT/tmp" "$ROOT/sys" "$ROOT/calls"
  done
  refute grep -q '^AWS_' "$ROOT/calls/runner.env"
  [ -z "$(ls -A "$ROOT/tmp")" ]
}

@test "the GitHub start command: run.sh --jitconfig as the runner user in the runner dir" {
  new_instance "$(cold_tags)"
  github_config jit-github-command
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(cat "$ROOT/calls/runner.args")" = "$(printf '%s\n' --jitconfig jit-github-command)" ]
  [ "$(calls_of runner)" = "$ROOT/runner/github/run.sh" ]
  [ "$(calls_of runner.user)" = "$RUNNER_USER" ]
  [ "$(calls_of runner.cwd)" = "$ROOT/runner/github" ]
}

@test "the GitLab start command: run-single with URL and token as arguments, one build, a wait timeout" {
  new_instance "$(cold_tags)"
  gitlab_config https://gitlab.example.com glrt-planted-token-0123456789
  boot_first gitlab
  [ "$status" -eq 0 ]
  [ "$(calls_of runner)" = "$ROOT/runner/gitlab/gitlab-runner" ]
  [ "$(cat "$ROOT/calls/runner.args")" = "$(printf '%s\n' run-single --url https://gitlab.example.com \
    --token glrt-planted-token-0123456789 --executor shell --max-builds 1 --wait-timeout 42 \
    --builds-dir "$ROOT/runner/gitlab/builds")" ]
  [ "$(calls_of runner.user)" = "$RUNNER_USER" ]
  # The shell executor's job inherits the runner's environment: no token there.
  refute grep -qF glrt-planted-token "$ROOT/calls/runner.env"
  refute grep -rqF glrt-planted-token "$ROOT/out" "$ROOT/var"
  refute param_exists
}

@test "a config for the other provider is refused" {
  new_instance "$(cold_tags)"
  gitlab_config https://gitlab.example.com glrt-wrong-pool-0123456789
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "is not for this pool's provider github" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
}

@test "/etc/machine-id is regenerated on the first RUN" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$(cat "$ROOT/etc/machine-id")" = 0123456789abcdef0123456789abcdef ]
  github_config jit-machine-id
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\"")"
  boot_hook
  [ "$status" -eq 0 ]
  local id
  id=$(cat "$ROOT/etc/machine-id")
  [[ $id =~ ^[0-9a-f]{32}$ ]]
  [ "$id" != 0123456789abcdef0123456789abcdef ]
}

@test "the runner's job line tags the instance job-started once; the runner's output and status pass through" {
  new_instance "$(cold_tags)"
  github_config jit-job-line
  printf '2026-12-01 12:00:00Z: Listening for Jobs\n2026-12-01 12:00:01Z: %sbuild\n2026-12-01 12:00:02Z: %sagain\n' \
    "$JOB_LINE_GITHUB" "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  echo 3 >"$ROOT/calls/runner-exit"
  boot_first github
  grep -qF 'Listening for Jobs' "$ROOT/out"
  grep -qF "${JOB_LINE_GITHUB}again" "$ROOT/out"
  grep -qF 'runner exited with status 3' "$ROOT/out"
  grep -qE "job started: tagged $TAG_JOB_STARTED=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z" "$ROOT/out"
  moto_tags | grep -qE "^$TAG_JOB_STARTED=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$"
  [ "$(aws_actions | grep -cx EC2.CreateTags)" -eq 1 ]
}

@test "the runner outlives its output watcher: the watcher killed mid-job, the runner writes on, completes its job and exits 0" {
  new_instance "$(cold_tags)"
  github_config jit-watcher-dies
  printf '2026-12-01 12:00:01Z: %sbuild\n' "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  printf '2026-12-01 12:00:09Z: Job build completed with result: Succeeded\n' >"$ROOT/calls/runner-say-end"
  scaled_seconds 60 >"$ROOT/calls/runner-hold"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "job started: tagged $TAG_JOB_STARTED="
  local watcher
  watcher=$(grep -oE "watching the runner's output \(watcher [0-9]+\)" "$ROOT/out" | head -n 1 | tr -dc 0-9)
  [ -n "$watcher" ]
  kill -KILL "$watcher"
  # Gone or a zombie (its parent reaps it later): either way it reads nothing more.
  while [[ $(ps -o stat= -p "$watcher" 2>/dev/null) == [^Z]* ]]; do sleep 0.1; done
  rm -f "$ROOT/calls/runner-hold"
  boot_wait
  [ "$status" -eq 0 ]
  [ -e "$ROOT/calls/runner.done" ]
  grep -qF 'runner exited with status 0' "$ROOT/out"
  # Nobody relayed the last line, but the runner's output file kept it.
  grep -qF "Job build completed with result: Succeeded" "$ROOT/var/lib/warm-runners/runner.out"
}

@test "GitLab: run-single's job received line tags the instance job-started" {
  new_instance "$(cold_tags)"
  gitlab_config https://gitlab.example.com glrt-job-line
  printf 'Runtime platform  arch=amd64 os=linux\n%s    job=1234 repo_url=https://gitlab.example.com/a/b.git runner=abcd\n' \
    "$JOB_LINE_GITLAB" >"$ROOT/calls/runner-say"
  boot_first gitlab
  [ "$status" -eq 0 ]
  moto_tags | grep -qE "^$TAG_JOB_STARTED="
}

@test "without a job line the instance reports no job start" {
  new_instance "$(cold_tags)"
  github_config jit-no-job
  printf '2026-12-01 12:00:00Z: Listening for Jobs\n' >"$ROOT/calls/runner-say"
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF 'Listening for Jobs' "$ROOT/out"
  refute grep -qF "$TAG_JOB_STARTED" "$ROOT/out"
  aws_actions | refute grep -qx EC2.CreateTags
}

@test "a config that names another instance is refused, kept whole, and starts no runner" {
  new_instance "$(launch_tags cold)"
  # Written under this instance's name, for another instance (scale-up's encoding otherwise).
  ctl POST /runner-config "{\"prefix\":\"$PREFIX\",\"for\":\"i-0aaaaaaaaaaaaaaaa\",\"config\":{\"provider\":\"github\",\"jitConfig\":\"jit-of-another\"}}" >/dev/null
  local before
  before=$(ctl GET "/param?name=$CONFIG_ROOT$INSTANCE_ID")
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "$CONFIG_ROOT$INSTANCE_ID names instance i-0aaaaaaaaaaaaaaaa, not $INSTANCE_ID: refused, not deleted, no runner started" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  # Nothing of it deleted: the parameter holds what it held, and no delete was sent.
  [ "$(ctl GET "/param?name=$CONFIG_ROOT$INSTANCE_ID")" = "$before" ]
  aws_actions | refute grep -qx AmazonSSM.DeleteParameter
  refute grep -qF jit-of-another "$ROOT/out"
  # A failed RUN of a cold instance: it terminates itself.
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a config that names no instance is refused like one for another instance: kept whole, no runner" {
  new_instance "$(launch_tags cold)"
  # Every scale-up writes instance=: a config without it was not written for this instance.
  ctl POST /param "{\"name\":\"$CONFIG_ROOT$INSTANCE_ID\",\"value\":\"version=1\\nprovider=github\\njitconfig=jit-unnamed\\n\"}" >/dev/null
  local before
  before=$(ctl GET "/param?name=$CONFIG_ROOT$INSTANCE_ID")
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "$CONFIG_ROOT$INSTANCE_ID names instance (none), not $INSTANCE_ID: refused, not deleted, no runner started" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  [ "$(ctl GET "/param?name=$CONFIG_ROOT$INSTANCE_ID")" = "$before" ]
  aws_actions | refute grep -qx AmazonSSM.DeleteParameter
  refute grep -qF jit-unnamed "$ROOT/out"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}
