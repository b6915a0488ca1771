#!/usr/bin/env bats
# The boot paths on a played stock image (issue 23, part 4): every test starts without the
# runner and without its user, as a stock Amazon Linux 2023 AMI does, and the install step's
# useradd really creates the user (helpers.bash stock_user, stock_machine), so a step that
# needs the user before the install fails here as on EC2. Each mode (cold RUN, WAIT, PRIME,
# later boots through the hook) boots the default rendering of both providers, and the reusable
# pool's rendering with cache directories (render-sandbox.ts: one in the runner's home, one
# outside it) in every reuse state (fresh, parked with its state, refused on a mismatch); the
# reuse path from PRIME through a fresh and a resumed RUN for both providers, the others once
# (their steps are the provider's only in the runner command the default modes cover). One image
# has the user but not its home (useradd -M or -r).

load helpers
load reuse-steps

setup_file() {
  needs_root 'a runner user that does not exist until the boot creates it: needs root'
  stock_user
  sandbox_start
}
teardown_file() { sandbox_stop; }
setup() {
  sandbox_reset
  rm -rf "${ROOT:?}/home"
  mkdir -p "$ROOT/var/tmp" "$ROOT/dev/shm"
  chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/dev/shm"
  stock_machine
  STATE_DIR=$ROOT/var/lib/warm-runners
}
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

# created_user: the boot created the runner user (the real one now exists), once.
created_user() {
  [ "$(calls_of useradd)" = "--create-home --user-group --shell /bin/bash $STOCK_USER" ]
  id -u "$STOCK_USER" >/dev/null
  [ "$(calls_of runner.user)" = "$STOCK_USER" ] || [ ! -e "$ROOT/calls/runner.user" ]
}

# The job of a reusable pool: fills both caches and adds a cache of another tool beside the one
# in the home (~/.cache/pip beside ~/.cache/deps), as the runner user.
CACHE_JOB='set -eu
echo one >"$CACHE/hit"
echo two >"$HOME_CACHE/hit"
mkdir "$HOME/.cache/pip"
echo filled'
cache_job() { job "CACHE=$REUSE_CACHE HOME_CACHE=$REUSE_HOME_CACHE
$CACHE_JOB"; }

# owned PATH USER: PATH is a directory of USER and of USER's login group.
owned() { [ "$(stat -c %U:%G "$1")" = "$2:$(id -gn "$2")" ]; }

# assert_caches: both caches the runner user's; below the home every directory on the way
# too; outside it, the parents as root left them.
assert_caches() {
  owned "$REUSE_CACHE" "$STOCK_USER"
  owned "$REUSE_HOME_CACHE" "$STOCK_USER"
  owned "${REUSE_HOME_CACHE%/*}" "$STOCK_USER"
  owned "$REUSE_HOME" "$STOCK_USER"
  [ "$(stat -c %U "${REUSE_CACHE%/*}")" = root ]
}

# runner_config PROVIDER NAME: the config scale-up writes for a job of PROVIDER, its secret
# named NAME.
# A cold launch of the reusable pool (fresh: uses 0) whose job fills the caches: it must boot,
# make the cache directories and run the job (the caller checks what the image lacked).
cold_reuse_run() {
  new_instance "$(launch_tags cold --affinity "$AFF")"
  sync_imds_tags
  ACT=$(moto_tags | sed -n "s/^$TAG_ACTIVATED=//p")
  reuse_config "$AFF" 0
  cache_job
  boot_first github-reuse
  [ "$status" -eq 0 ]
  refute grep -qF "cannot create the cache directories" "$ROOT/out"
}

runner_config() {
  if [[ $1 == github ]]; then github_config "jit-$2"; else gitlab_config https://gitlab.example.test "glrt-$2"; fi
}
# release_of PROVIDER: the path of PROVIDER's runner package the install step downloads here.
release_of() { if [[ $1 == github ]]; then echo /github-x64.tar.gz; else echo /gitlab-x64; fi; }

default_cold_run() {
  local provider=$1
  new_instance "$(launch_tags cold)"
  runner_config "$provider" stock
  boot_first "$provider"
  [ "$status" -eq 0 ]
  created_user
  [ "$(calls_of runner.user)" = "$STOCK_USER" ]
  [ "$(release_requests)" = "$(release_of "$provider")" ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  moto_tags | refute grep -q "^$TAG_START_FAILURE="
}

default_cold_wait() {
  local provider=$1
  new_instance "$(launch_tags cold)"
  boot_background "$ROOT/user-data-$provider.sh"
  wait_for_log "installed the $provider runner"
  runner_config "$provider" stock-wait
  boot_wait
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  created_user
  [ "$(calls_of runner.user)" = "$STOCK_USER" ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

default_prime_hook() {
  local provider=$1
  new_instance "$(launch_tags standby)"
  boot_first "$provider"
  [ "$status" -eq 0 ]
  called shutdown '-h now'
  created_user
  [ ! -e "$ROOT/calls/runner" ]
  # Rolled back and started again unclaimed: the hook primes again, installing nothing.
  rm -f "$ROOT/calls/shutdown"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=PRIME" "$ROOT/out"
  called shutdown '-h now'
  [ "$(calls_of useradd | wc -l)" -eq 1 ]
  [ "$(release_requests)" = "$(release_of "$provider")" ]
  # Claimed: the hook RUNs.
  set_tags "$(launch_tags activated --seconds-ago 1)"
  runner_config "$provider" stock-hook
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=RUN" "$ROOT/out"
  [ "$(calls_of runner.user)" = "$STOCK_USER" ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

for provider in github gitlab; do
  bats_test_function --description "stock image, default rendering ($provider): a cold RUN creates the user, installs and runs the runner as it, then terminates" -- default_cold_run "$provider"
  bats_test_function --description "stock image, default rendering ($provider): a cold WAIT installs while it waits, then RUNs as the user it created" -- default_cold_wait "$provider"
  bats_test_function --description "stock image, default rendering ($provider): PRIME creates the user and parks; the hook re-primes, then RUNs as that user" -- default_prime_hook "$provider"
done

@test "stock image, reusable pool with caches: a cold RUN (fresh) creates the user, then the caches as its, runs the job and parks" {
  cold_reuse_run
  created_user
  grep -qx filled "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  assert_parked 1
  assert_caches
  [ "$(cat "$REUSE_HOME_CACHE/hit")" = two ]
  # The other tool's cache is the job's, not a cache directory: cleaned.
  [ ! -e "$REUSE_HOME/.cache/pip" ]
}

@test "stock image, reusable pool with caches: a runner user without its home (useradd -M) gets it from the boot, the user's, then the caches" {
  # An image whose runner user was made without a home: the install step adds no user, and the
  # runner user cannot create its home in the root-owned parent.
  useradd --no-create-home --home-dir "$REUSE_HOME" --user-group --shell /bin/bash "$STOCK_USER"
  [ ! -e "$REUSE_HOME" ]
  [ "$(stat -c %U "${REUSE_HOME%/*}")" = root ]
  cold_reuse_run
  [ ! -e "$ROOT/calls/useradd" ]
  grep -qx filled "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  assert_parked 1
  assert_caches
  [ "$(stat -c %a "$REUSE_HOME")" = 700 ]
}

@test "stock image, reusable pool with caches: a cold WAIT installs, then RUNs fresh and parks" {
  new_instance "$(launch_tags cold --affinity "$AFF")"
  sync_imds_tags
  ACT=$(moto_tags | sed -n "s/^$TAG_ACTIVATED=//p")
  cache_job
  boot_background "$ROOT/user-data-github-reuse.sh"
  wait_for_log "installed the github runner"
  reuse_config "$AFF" 0
  boot_wait
  [ "$status" -eq 0 ]
  grep -qF "$LOG_MODE=WAIT" "$ROOT/out"
  created_user
  grep -qx filled "$ROOT/calls/job.out"
  assert_parked 1
  assert_caches
}

reuse_prime_fresh_resumed() {
  reuse_provider "$1"
  primed_standby
  created_user
  [ ! -e "$REUSE_HOME_CACHE" ]
  activate 1
  reuse_config "$AFF" 0
  cache_job
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx filled "$ROOT/calls/job.out"
  assert_parked 1
  assert_caches
  # Claimed again for the same repository: resumed onto the caches it parked with.
  rm -f "$ROOT/calls/shutdown" "$ROOT/calls/job.out"
  activate 2
  reuse_config "$AFF" 1
  job "cat $REUSE_CACHE/hit $REUSE_HOME_CACHE/hit; mkdir \"\$HOME/.cache/pip\" && echo again"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "reuse: $AFF, use 2 of at most $REUSE_MAX_JOBS" "$ROOT/out"
  [ "$(cat "$ROOT/calls/job.out")" = $'one\ntwo\nagain' ]
  assert_parked 2
  assert_caches
  [ "$(calls_of useradd | wc -l)" -eq 1 ]
}
for provider in github gitlab; do
  bats_test_function --description "stock image, reusable pool with caches ($provider): PRIME, a fresh RUN through the hook, then a resumed RUN onto its parked state" -- reuse_prime_fresh_resumed "$provider"
done

@test "stock image, reusable pool: a cold RUN whose config claims earlier uses is refused before the install creates anything" {
  new_instance "$(launch_tags cold --affinity "$AFF")"
  sync_imds_tags
  reuse_config "$AFF" 1
  boot_first github-reuse
  assert_refused "says 1 uses, but this instance has no reuse state: refused"
  [ ! -e "$ROOT/calls/useradd" ]
  refute id -u "$STOCK_USER" &>/dev/null
  [ "$(release_requests)" = '' ]
  [ ! -e "$REUSE_CACHE" ]
}

@test "stock image, reusable pool: after a park the resume check refuses another affinity, a missing cache, a stale run" {
  local parked old mismatch aff
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  boot_hook
  [ "$status" -eq 0 ]
  assert_parked 1
  assert_caches
  parked=$(cat "$STATE_DIR/reuse") old=$INSTANCE_ID
  for mismatch in affinity cache stale; do
    # The parked state, user, caches and hook of that real park, on an instance of its own
    # each time (a refusal terminates it).
    new_instance "$(launch_tags standby)"
    printf '%s\n' "${parked/#$old/$INSTANCE_ID}" >"$STATE_DIR/reuse"
    rm -f "$ROOT/calls/runner" "$ROOT/calls/shutdown" "$STATE_DIR/run-began"
    aff=$AFF
    case $mismatch in
      affinity) aff=github:other/app ;;
      cache) mv "$REUSE_CACHE" "$REUSE_CACHE.kept" ;;
      stale) printf '%s %s\n' "$INSTANCE_ID" 2026-12-01T00:00:00.000Z >"$STATE_DIR/run-began" ;;
    esac
    activate 2 "$aff"
    reuse_config "$aff" 1
    boot_hook
    case $mismatch in
      affinity) assert_refused "is for github:other/app, but this instance's caches are of $AFF: refused" ;;
      cache) assert_refused "cache directory $REUSE_CACHE is missing after 1 uses: refused" && mv "$REUSE_CACHE.kept" "$REUSE_CACHE" ;;
      stale) assert_refused "the run-began marker of activation 2026-12-01T00:00:00.000Z: a job may be in progress; refused" ;;
    esac
  done
}
