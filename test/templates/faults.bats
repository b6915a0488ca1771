#!/usr/bin/env bats
# Faults injected from outside the script: IMDS that does not answer, SSM throttling (by the
# proxy in front of moto, with the CLI's own retries off), instance tags kept out of IMDS.

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

@test "IMDS unreachable: bounded retries, then a loud failure that touches nothing" {
  new_instance "$(cold_tags)"
  github_config jit-no-imds
  ctl POST /imds '{"down":true}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "issued no token after 3 attempts" "$ROOT/out"
  grep -qF "before the tags were read: not terminating" "$ROOT/out"
  # Exactly the configured attempts, all for the token: no IMDS call without one.
  [ "$(imds_paths | sort | uniq -c | awk '{print $1, $2}')" = "3 /latest/api/token" ]
  [ "$(aws_actions)" = '' ]
  [ ! -e "$ROOT/calls/runner" ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "IMDS not answering the first requests of a boot: the token request is retried, then RUN" {
  new_instance "$(cold_tags)"
  github_config jit-imds-late
  ctl POST /imds '{"dropNext":2}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(grep -c "IMDS api/token answered 000" "$ROOT/out")" -eq 2 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-imds-late ]
}

@test "IMDS slower than the aws CLI's own 1 s default: the CLI waits the rendered IMDS timeout for its credentials" {
  new_instance "$(cold_tags)"
  github_config jit-slow-imds
  # Each role-credentials request answers after 1.5 s: beyond the CLI's default (1 s, one
  # attempt), within the rendered IMDS timeout (at least 3 s here).
  ctl POST /imds '{"credentialsDelayMs":1500}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  refute grep -qF "Unable to locate credentials" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-slow-imds ]
  refute param_exists
}

@test "SSM throttled while choosing the mode: retried and logged, never read as no config" {
  new_instance "$(cold_tags "\"$TAG_TRACE\":\"trace-throttled\"")"
  github_config jit-throttled
  # Four refusals: the rendered two CLI attempts (standard mode, set per call by the script)
  # of each of the script's first two attempts; the third gets through.
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":4}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(grep -c "ThrottlingException" "$ROOT/out")" -eq 2 ]
  grep -qF "reading $CONFIG_ROOT$INSTANCE_ID failed (attempt 2/3)" "$ROOT/out"
  refute grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(aws_actions | grep -c AmazonSSM.GetParameter)" -eq 5 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-throttled ]
}

@test "SSM throttled on every attempt: the boot fails instead of waiting or priming" {
  new_instance "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 5)\"")"
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "not taking that for no config" "$ROOT/out"
  refute grep -qF "$LOG_MODE=" "$ROOT/out"
  # Three script attempts of two CLI attempts each, and not one more.
  [ "$(aws_actions | grep -c AmazonSSM.GetParameter)" -eq 6 ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ ! -e "$ROOT/usr/local/sbin/start-runner" ]
}

@test "instance tags not in instance metadata: a loud failure, neither PRIME nor terminate" {
  new_instance "$(warm_tags)" '"tagsEnabled":false'
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "enable InstanceMetadataTags in the launch template" "$ROOT/out"
  [ "$(aws_actions)" = '' ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "SSM unreachable for a moment (network not up yet): retried and logged, then RUN" {
  new_instance "$(cold_tags)"
  github_config jit-network
  # The next two requests (both CLI attempts of the script's first) are dropped without an
  # answer, as by a network that is not up yet.
  ctl POST /drop '{"count":2}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "reading $CONFIG_ROOT$INSTANCE_ID failed (attempt 1/3)" "$ROOT/out"
  refute grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-network ]
}

@test "AccessDenied while choosing the mode: retried and logged, never read as no config" {
  new_instance "$(warm_tags)"
  github_config jit-denied
  # A parked instance started through the hook, its activation tags not visible yet: a
  # config read refused twice (IAM not settled, say) must neither PRIME nor WAIT.
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":2,"error":"AccessDeniedException"}' >/dev/null
  mkdir -p "$ROOT/usr/local/sbin"
  install -m 755 "$ROOT/hook-github.sh" "$ROOT/usr/local/sbin/start-runner"
  boot_hook
  [ "$status" -eq 0 ]
  # The CLI does not retry AccessDenied: one request per script attempt, each logged.
  [ "$(grep -c "AccessDeniedException" "$ROOT/out")" -eq 2 ]
  grep -qF "reading $CONFIG_ROOT$INSTANCE_ID failed (attempt 2/3)" "$ROOT/out"
  refute grep -qE "$LOG_MODE=(WAIT|PRIME)" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(aws_actions | grep -c AmazonSSM.GetParameter)" -eq 3 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-denied ]
}

@test "an SSM call that never answers times out on the rendered read timeout, is retried, then RUN" {
  new_instance "$(cold_tags)"
  github_config jit-hung
  # Both CLI attempts of the first script attempt are accepted and never answered.
  ctl POST /hang '{"action":"AmazonSSM.GetParameter","count":2}' >/dev/null
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "reading $CONFIG_ROOT$INSTANCE_ID failed (attempt 1/3)" "$ROOT/out"
  grep -qi "read timeout" "$ROOT/out"
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(ctl GET /log | grep -oE '"status":-1' | wc -l)" -eq 2 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-hung ]
  # The CLI's second attempt followed the first hung one after the rendered read timeout: not
  # sooner, and not after the CLI's own default of 60 s (the rendered one is at most 30 s).
  local hung
  hung=$(ctl GET /log | grep -oE '"t":[0-9.]+,"action":"AmazonSSM.GetParameter","accessKeyId":"[^"]*","status":-1' |
    cut -d: -f2 | cut -d, -f1)
  awk -v r="$READ_TIMEOUT" '{ t[NR] = $1 } END { d = t[2] - t[1]; print "hung attempts " d " ms apart" > "/dev/stderr"; exit !(NR == 2 && d >= r * 1000 && d < 60000) }' <<<"$hung"
}

@test "WAIT gives up at its bound even when an SSM call hangs longer than the bound" {
  new_instance "$(cold_tags)"
  # This rendering's WAIT bound is short and its read timeout (60 s) longer: only the bound
  # itself can end a hung call. The mode's config read is answered (no config: WAIT) and
  # every read after it hangs, so the hang begins with WAIT's first poll, not whenever the
  # test saw WAIT logged: that poll's request has the whole bound to reach the proxy.
  ctl POST /hang '{"action":"AmazonSSM.GetParameter","after":1,"count":100}' >/dev/null
  boot "$ROOT/user-data-github-short-wait.sh"
  # Its own failure (1), not the safety bound's kill (124).
  [ "$status" -eq 1 ]
  grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  grep -qF "stopped at the WAIT bound" "$ROOT/out"
  # One poll, hung from its start until the bound ended it.
  grep -qE "no runner config at $CONFIG_ROOT$INSTANCE_ID after ${SHORT_WAIT_SECONDS}s \(1 polls\)" "$ROOT/out"
  [ "$(ctl GET /log | grep -oE '"status":-1' | wc -l)" -eq 1 ]
  local t
  t=$(aws_times AmazonSSM.GetParameter)
  awk -v b="$SHORT_WAIT_SECONDS" '{ t[NR] = $1 } END { print "the hung poll reached the proxy " (t[2] - t[1]) " ms after the mode read (bound " b " s)" > "/dev/stderr" }' <<<"$t"
  # The cold instance still terminates itself (EC2 answers).
  aws_actions | grep -qx EC2.TerminateInstances
}

# Every test below boots an instance with the exact tags its launch path sets
# (launch_tags: the functions the Lambdas send them with), and fails the config read on every
# attempt, so the boot cannot choose a mode.

@test "a cold launch (scale-up's exact tags) whose config read is throttled on every attempt terminates itself" {
  new_instance "$(launch_tags cold)"
  github_config jit-cold-throttled
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "not taking that for no config" "$ROOT/out"
  refute grep -qF "$LOG_MODE=" "$ROOT/out"
  grep -qF "failed (status 1) in a cold start: terminating" "$ROOT/out"
  refute grep -qF "left for the pool to evict" "$ROOT/out"
  aws_actions | grep -qx EC2.TerminateInstances
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # Nothing was read, so nothing is deleted: the config stays for scale-up's rollback or the sweep.
  param_exists
  [ ! -e "$ROOT/calls/runner" ]
}

@test "a cold launch (scale-up's exact tags) denied its config read terminates itself" {
  new_instance "$(launch_tags cold)"
  github_config jit-cold-denied
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100,"error":"AccessDeniedException"}' >/dev/null
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "AccessDeniedException" "$ROOT/out"
  refute grep -qF "$LOG_MODE=" "$ROOT/out"
  refute grep -qF "left for the pool to evict" "$ROOT/out"
  aws_actions | grep -qx EC2.TerminateInstances
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "an activated warm standby (the pool's and scale-up's exact tags) failing before a mode is left for the pool" {
  new_instance "$(launch_tags activated)"
  github_config jit-warm-throttled
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100}' >/dev/null
  mkdir -p "$ROOT/usr/local/sbin"
  install -m 755 "$ROOT/hook-github.sh" "$ROOT/usr/local/sbin/start-runner"
  boot_hook
  [ "$status" -ne 0 ]
  refute grep -qF "$LOG_MODE=" "$ROOT/out"
  grep -qF "warm standby failed (status 1) before a mode: left for the pool to evict" "$ROOT/out"
  aws_actions | refute grep -qx EC2.TerminateInstances
  [ "$(instance_state)" = running ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "an activated warm standby failing before a mode, IMDS silent for its standby tag, is left running" {
  new_instance "$(launch_tags activated)"
  github_config jit-warm-no-standby-tag
  ctl POST /throttle '{"action":"AmazonSSM.GetParameter","count":100}' >/dev/null
  # The activated path reads only the activation tags; the standby tag is asked only on failure.
  ctl POST /imds "{\"downPaths\":[\"/latest/meta-data/tags/instance/$TAG_WARM\"]}" >/dev/null
  mkdir -p "$ROOT/usr/local/sbin"
  install -m 755 "$ROOT/hook-github.sh" "$ROOT/usr/local/sbin/start-runner"
  boot_hook
  [ "$status" -ne 0 ]
  grep -qF "IMDS did not answer for tag $TAG_WARM: cannot tell a warm standby" "$ROOT/out"
  grep -qF "warm standby failed (status 1) before a mode: left for the pool to evict" "$ROOT/out"
  aws_actions | refute grep -qx EC2.TerminateInstances
  [ "$(instance_state)" = running ]
}

@test "the tags of a warm standby's priming boot (the pool's exact tags) PRIME without any SSM call" {
  new_instance "$(launch_tags standby)"
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  [ "$(aws_actions)" = '' ]
  [ -e "$ROOT/calls/shutdown" ]
}

@test "a failure reason loses a URL's userinfo and query before it becomes a tag anyone may read" {
  # The rendered function itself, with the CLI call captured: what reaches the tag value.
  local fn
  fn=$(sed -n '/^tag_failure() {$/,/^}$/p' "$ROOT/user-data-github.sh")
  [ -n "$fn" ]
  run bash -c "$fn"'
    ID=i-0123456789abcdef0 TAG_FAILED=t:start-failure ERR=
    log() { :; }
    aws_try() { shift; printf "%s\n" "$@" >&2; }
    tag_failure "RUN failed: download of https://user:s3cr3t@mirror.example/a/b.tar.gz?X-Amz-Signature=abc123&x=1 failed, then ftp://tok@host/x?q=z"'
  [ "$status" -eq 0 ]
  local value
  value=$(grep -o 'Key=t:start-failure,Value=.*' <<<"$output")
  [ "$value" = "Key=t:start-failure,Value=RUN failed: download of https://mirror.example/a/b.tar.gz failed then ftp://host/x" ]
  refute grep -qE 's3cr3t|abc123|tok@' <<<"$output"
}

@test "the job-started CreateTags throttled past one aws_try is retried in later rounds; the runner works meanwhile" {
  new_instance "$(cold_tags)"
  github_config jit-tag-throttled
  printf '2026-12-01 12:00:01Z: %sbuild\n' "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  # Enough refusals for a whole aws_try (3 attempts of up to 2 CLI attempts each), not for two.
  ctl POST /throttle '{"action":"EC2.CreateTags","count":6}' >/dev/null
  scaled_seconds 60 >"$ROOT/calls/runner-hold"
  boot_background "$ROOT/user-data-github.sh"
  wait_for_log "job started: tagged $TAG_JOB_STARTED="
  rm -f "$ROOT/calls/runner-hold"
  boot_wait
  [ "$status" -eq 0 ]
  grep -qF "$TAG_JOB_STARTED not tagged in round 1/7" "$ROOT/out"
  refute grep -qF "scale-down has only the CI service's readings" "$ROOT/out"
  moto_tags | grep -qE "^$TAG_JOB_STARTED=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$"
  [ "$(aws_actions | grep -c EC2.CreateTags)" -gt 3 ]
}
