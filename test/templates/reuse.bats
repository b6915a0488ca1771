#!/usr/bin/env bats
# Reuse (issue 12) in the boot sandbox: the reusable pool's rendering (render-sandbox.ts maps
# the runner user's home, /tmp, /var/tmp, /dev/shm and two cache directories under the sandbox
# root) cleans and parks after every final state of its job, refuses to resume onto state it
# did not park with, and terminates at its limits. Cleaning kills every process of the runner
# user, so these tests run as root with a user of their own (REUSE_USER), never this machine's.

load helpers
load reuse-steps

REUSE_USER=cwr-reuse
export REUSE_USER

setup_file() {
  needs_root 'cleaning kills every process of the runner user: needs root and a user of its own'
  # The real useradd (the sandbox's shim only records): a system user nothing else runs as.
  id "$REUSE_USER" &>/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin "$REUSE_USER"
  sandbox_start
}
teardown_file() { sandbox_stop; }
setup() {
  sandbox_reset
  rm -rf "${ROOT:?}/home"
  mkdir -p "$REUSE_HOME" "$ROOT/var/tmp" "$ROOT/dev/shm"
  chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/dev/shm"
  # As the install step leaves them: the runner directory and the home are the runner user's.
  chown -R "$REUSE_USER:" "$REUSE_HOME" "$ROOT/runner/github" "$ROOT/runner/gitlab"
  STATE_DIR=$ROOT/var/lib/warm-runners
}
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

# What a job leaves everywhere it can write: the workspace, the home, the temp directories,
# a process with the secret in its environment, and a file in each cache directory.
PLANT='set -eu
S=$(cat "$CALLS/secret")
mkdir -p _work/app "$HOME/.config" "$CACHE" "$HOME_CACHE"
echo "$S" >_work/app/secret.txt
echo "$S" >"$HOME/.config/token"
echo "$S" >"$HOME/.bash_history"
for d in "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/dev/shm"; do echo "$S" >"$d/secret"; mkdir -p "$d/dir" && echo "$S" >"$d/dir/.hidden"; done
echo cache-one >"$CACHE/hit"
echo cache-two >"$HOME_CACHE/hit"
LEFTOVER=$S setsid sleep 120 </dev/null >/dev/null 2>&1 &
echo planted'

plant_job() {
  openssl rand -hex 16 >"$ROOT/calls/secret" 2>/dev/null || head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$ROOT/calls/secret"
  chmod 644 "$ROOT/calls/secret"
  job "CALLS=$ROOT/calls ROOT=$ROOT CACHE=$REUSE_CACHE HOME_CACHE=$REUSE_HOME_CACHE
$PLANT"
}

@test "reuse: after a successful job the instance cleans itself and parks with its affinity and use count" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0 jit-first
  plant_job
  # The runner reports its job: job-started is tagged, and must be gone again when it parks.
  echo "$JOB_LINE_GITHUB" >"$ROOT/calls/runner-say"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx planted "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  grep -qF "job started: tagged $TAG_JOB_STARTED=" "$ROOT/out"
  assert_parked 1
  # The parking tag, then the reuse tags, then the activation's tags removed.
  [ "$(aws_actions | grep -xE 'EC2.(CreateTags|DeleteTags|TerminateInstances)' | tail -n 3 | tr '\n' ' ')" = 'EC2.CreateTags EC2.CreateTags EC2.DeleteTags ' ]
  # Cleaned: the secret is nowhere in the sandbox's writable world; the caches stayed.
  nowhere_in "$(cat "$ROOT/calls/secret")" "$ROOT/runner" "$REUSE_HOME" "$ROOT/tmp" "$ROOT/var" "$ROOT/dev"
  [ "$(cat "$REUSE_CACHE/hit")" = cache-one ]
  [ "$(cat "$REUSE_HOME_CACHE/hit")" = cache-two ]
  [ -z "$(ls -A "$ROOT/runner/github/_work" 2>/dev/null)" ]
  [ ! -e "$STATE_DIR/runner.out" ]
  [ -z "$(find "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/dev/shm" -mindepth 1)" ]
  # The planted process is gone (a zombie at most: this sandbox's PID 1 does not reap).
  refute bash -c "ps -U $REUSE_USER -o stat= | grep -q '^[^Z]'"
}

@test "reuse: a fresh instance creates the cache directories for the runner user, in its home every directory on the way" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  # Another tool's cache beside the listed one, as a job does (pip beside the listed tool's).
  job "mkdir \"\$HOME/.cache/pip\" && echo beside"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx beside "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  assert_parked 1
  local d
  for d in "$REUSE_HOME/.cache" "$REUSE_HOME_CACHE" "$REUSE_CACHE"; do
    [ "$(stat -c %U:%G "$d")" = "$REUSE_USER:$(id -gn "$REUSE_USER")" ]
  done
  # Outside the home, root creates the way and hands over the cache directory only.
  [ "$(stat -c %U "${REUSE_CACHE%/*}")" = root ]
}

@test "reuse: a failed job parks the same way" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  plant_job
  echo 1 >"$ROOT/calls/runner-exit"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "runner exited with status 1" "$ROOT/out"
  grep -qx planted "$ROOT/calls/job.out"
  assert_parked 1
  nowhere_in "$(cat "$ROOT/calls/secret")" "$ROOT/runner" "$REUSE_HOME" "$ROOT/tmp" "$ROOT/var" "$ROOT/dev"
}

@test "reuse: a cancelled job (the runner ended by a signal) parks the same way" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  plant_job
  scaled_seconds 60 >"$ROOT/calls/runner-hold"
  boot_background "$ROOT/usr/local/sbin/start-runner"
  local bound=$(($(scaled_seconds 60) * 10)) n=0
  while [[ ! -s $ROOT/calls/runner.pid ]] && ((n++ < bound)); do sleep 0.1; done
  kill -TERM "$(cat "$ROOT/calls/runner.pid")"
  boot_wait
  rm -f "$ROOT/calls/runner-hold"
  [ "$status" -eq 0 ]
  grep -qF "runner exited with status 143" "$ROOT/out"
  grep -qx planted "$ROOT/calls/job.out"
  assert_parked 1
  nowhere_in "$(cat "$ROOT/calls/secret")" "$ROOT/runner" "$REUSE_HOME" "$ROOT/tmp" "$ROOT/var" "$ROOT/dev"
}

@test "reuse: a second job of the same affinity sees the caches and nothing else of the first" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0 jit-first
  plant_job
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx planted "$ROOT/calls/job.out"
  assert_parked 1
  # Scale-up claims the parked instance for the next job of the same repository.
  rm -f "$ROOT/calls/shutdown" "$ROOT/calls/runner"
  activate 2
  reuse_config "$AFF" 1 jit-second
  # The second job looks for the secret everywhere it can read, as the runner user: its
  # workspace and runner directory, its home, the temp directories, the caches, its
  # environment, and the environment and command line of every other process of its user.
  job "CALLS=$ROOT/calls
cd \"\$PWD\"
{ cat $REUSE_CACHE/hit; cat $REUSE_HOME_CACHE/hit; } >\"\$CALLS/job2.cache\"
{
  grep -rlF -f \"\$CALLS/secret\" \"\$PWD\" \"\$HOME\" $ROOT/tmp $ROOT/var/tmp $ROOT/dev/shm $ROOT/var/cache 2>/dev/null || true
  env | grep -F -f \"\$CALLS/secret\" || true
  for p in /proc/[0-9]*; do
    [[ \$p != /proc/\$\$ && -O \$p ]] || continue
    grep -lF -f \"\$CALLS/secret\" \$p/environ \$p/cmdline 2>/dev/null || true
  done
} >\"\$CALLS/job2.found\"
echo searched"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx searched "$ROOT/calls/job.out"
  [ "$(cat "$ROOT/calls/job2.cache")" = $'cache-one\ncache-two' ]
  [ ! -s "$ROOT/calls/job2.found" ] || { cat "$ROOT/calls/job2.found" >&2 && false; }
  assert_parked 2
}

@test "reuse: refused when a cache directory is missing" {
  primed_standby
  parked_state 1
  activate 2
  reuse_config "$AFF" 1
  rm -rf "$REUSE_CACHE"
  boot_hook
  assert_refused "cache directory $REUSE_CACHE is missing after 1 uses: refused"
}

@test "reuse: refused for a config of another affinity" {
  primed_standby
  parked_state 1
  activate 2 github:other/app
  mkdir -p "$REUSE_CACHE" "$REUSE_HOME_CACHE"
  reuse_config github:other/app 1
  boot_hook
  assert_refused "is for github:other/app, but this instance's caches are of $AFF: refused"
}

@test "reuse: refused for a wrong use count, parked or fresh" {
  primed_standby
  parked_state 2
  activate 3
  mkdir -p "$REUSE_CACHE" "$REUSE_HOME_CACHE"
  reuse_config "$AFF" 1
  boot_hook
  assert_refused "says 1 uses, but this instance parked after 2: refused"

  primed_standby
  activate 1
  reuse_config "$AFF" 2
  boot_hook
  assert_refused "says 2 uses, but this instance has no reuse state: refused"
}

@test "reuse: refused for a config without reuse on an instance that parked with caches" {
  primed_standby
  parked_state 1
  activate 2
  github_config jit-plain
  boot_hook
  assert_refused "this instance parked with caches of $AFF, but $CONFIG_ROOT$INSTANCE_ID or the pool has no reuse: refused"
}

@test "reuse: refused when the run-began marker names another activation (a job that never parked)" {
  primed_standby
  parked_state 1
  mkdir -p "$REUSE_CACHE" "$REUSE_HOME_CACHE"
  printf '%s %s\n' "$INSTANCE_ID" 2026-12-01T00:00:00.000Z >"$STATE_DIR/run-began"
  activate 2
  reuse_config "$AFF" 1
  boot_hook
  assert_refused "the run-began marker of activation 2026-12-01T00:00:00.000Z: a job may be in progress; refused"
}

@test "reuse: a run-began marker of this activation is a reboot mid-job: nothing starts again" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  printf '%s %s\n' "$INSTANCE_ID" "$ACT" >"$STATE_DIR/run-began"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "a RUN began on an earlier boot: not starting again" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  [ "$(instance_state)" = running ]
}

@test "reuse: the marker and reuse state of another instance (an image baked from a parked one) are ignored" {
  primed_standby
  printf '%s %s\n' i-0aaaaaaaaaaaaaaaa 2026-12-01T00:00:00.000Z >"$STATE_DIR/run-began"
  printf '%s %s %s %s\n' i-0aaaaaaaaaaaaaaaa 2026-12-01T00:00:00.000Z github:other/app 5 >"$STATE_DIR/reuse"
  printf '%s %s\n' i-0aaaaaaaaaaaaaaaa 1 >"$STATE_DIR/first-boot"
  activate 1
  reuse_config "$AFF" 0
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "ignoring the run-began marker of i-0aaaaaaaaaaaaaaaa" "$ROOT/out"
  # Its age counts from this instance's first boot, not from the other one's.
  assert_parked 1
}

@test "reuse: the job that reaches maxJobs terminates instead of parking" {
  primed_standby
  parked_state $((REUSE_MAX_JOBS - 1))
  mkdir -p "$REUSE_CACHE" "$REUSE_HOME_CACHE"
  activate "$REUSE_MAX_JOBS"
  reuse_config "$AFF" $((REUSE_MAX_JOBS - 1))
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "served $REUSE_MAX_JOBS of $REUSE_MAX_JOBS jobs: not parking" "$ROOT/out"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  [ ! -e "$ROOT/calls/shutdown" ]
  moto_tags | refute grep -q "^$TAG_USES="
}

@test "reuse: an instance past maxAge (from its first boot) terminates instead of parking" {
  primed_standby
  printf '%s %s\n' "$INSTANCE_ID" $(($(date +%s) - 7200)) >"$STATE_DIR/first-boot"
  activate 1
  reuse_config "$AFF" 0
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "older than 3600s: not parking" "$ROOT/out"
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "reuse: a tag that cannot be written terminates instead of parking" {
  primed_standby
  activate 1
  reuse_config "$AFF" 0
  ctl POST /throttle '{"action":"EC2.DeleteTags","count":100}' >/dev/null
  boot_hook
  [ "$status" -eq 0 ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  [ ! -e "$ROOT/calls/shutdown" ]
}

# The affinity tag is scale-up's alone: a job that could not retag its instance (the role
# denies it) still must not get it parked under an affinity other than its config's.
@test "reuse: an affinity tag absent or not the config's at park terminates instead of parking" {
  local aff
  for aff in '' github:other/app; do
    primed_standby
    activate 1 "$aff"
    reuse_config "$AFF" 0
    boot_hook
    [ "$status" -eq 0 ]
    if [[ -z $aff ]]; then
      grep -qF "error: this instance has no $TAG_AFFINITY tag: not parking" "$ROOT/out"
    else
      grep -qF "error: this instance's $TAG_AFFINITY tag is $aff, not $AFF: not parking" "$ROOT/out"
    fi
    [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
    [ ! -e "$ROOT/calls/shutdown" ]
    [ ! -e "$STATE_DIR/reuse" ]
    moto_tags | refute grep -q "^$TAG_USES="
  done
}

@test "reuse: a cold launch of a reusable pool installs the hook when it parks" {
  new_instance "$(launch_tags cold --affinity "$AFF")"
  sync_imds_tags
  ACT=$(moto_tags | sed -n "s/^$TAG_ACTIVATED=//p")
  reuse_config "$AFF" 0
  boot_first github-reuse
  [ "$status" -eq 0 ]
  [ -x "$ROOT/usr/local/sbin/start-runner" ]
  [ "$(tail -n 1 "$ROOT/usr/local/sbin/start-runner")" = "$END_MARKER" ]
  assert_parked 1
}

@test "reuse: a cold launch prepares before its first job; the reused instance's next job does not prepare again" {
  new_instance "$(launch_tags cold --affinity "$AFF")"
  sync_imds_tags
  ACT=$(moto_tags | sed -n "s/^$TAG_ACTIVATED=//p")
  reuse_config "$AFF" 0
  boot_first github-reuse
  [ "$status" -eq 0 ]
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  assert_parked 1
  rm -f "$ROOT/calls/shutdown" "$ROOT/calls/runner"
  activate 2
  reuse_config "$AFF" 1 jit-second
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF "starting the github runner" "$ROOT/out"
  # What the prepare commands made stays, as the caches do; they are not run on the job's path.
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  assert_parked 2
}
