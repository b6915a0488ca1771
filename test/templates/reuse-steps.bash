# shellcheck shell=bash
# The steps of a reusable pool's life in the boot sandbox, for reuse.bats and stock.bats: what
# scale-up's claim writes (tags, config), the state a park leaves, and what a park or a refusal
# must leave behind. Needs helpers.bash loaded and STATE_DIR set.
# shellcheck disable=SC2154 # status: set by helpers.bash's boot, as bats's run would

# The provider of the reusable pool's rendering these steps boot (user-data-<provider>-reuse.sh)
# and its job's affinity; reuse_provider switches both.
REUSE_PROVIDER=github
AFF=github:acme/app
reuse_provider() {
  REUSE_PROVIDER=$1
  case $1 in
    github) AFF=github:acme/app ;;
    gitlab) AFF=gitlab:4242 ;;
    *) echo "no provider $1" >&2 && return 1 ;;
  esac
}

# The tags moto holds for the instance, as IMDS shows them from now on.
sync_imds_tags() {
  set_tags "$(moto_aws ec2 describe-tags --filters "Name=resource-id,Values=$INSTANCE_ID" --output json |
    node -e 'const t=JSON.parse(require("fs").readFileSync(0,"utf8")).Tags;console.log(JSON.stringify(Object.fromEntries(t.map(x=>[x.Key,x.Value]))))')"
}

# A standby of the reusable pool, primed (the hook installed and enabled) and powered off.
primed_standby() {
  new_instance "$(launch_tags standby)"
  boot_first "$REUSE_PROVIDER-reuse"
  [ "$status" -eq 0 ]
  called shutdown '-h now'
  rm -f "$ROOT/calls/shutdown"
}

# activate N [AFFINITY]: what scale-up's claim does: the activation tags of job N with the
# affinity it writes with them (AFF by default, none when empty; the exact tags of
# launch-tags.ts) in moto and so in IMDS; ACT is their activated-at.
activate() {
  local json aff=${2-$AFF}
  json=$(launch_tags activated --seconds-ago 1 --job-id "$REUSE_PROVIDER:1:$1" --trace-id "trace-reuse-$1" ${aff:+--affinity "$aff"})
  moto_aws ec2 create-tags --resources "$INSTANCE_ID" --tags "$(node -e 'console.log(JSON.stringify(Object.entries(JSON.parse(process.argv[1])).map(([Key,Value])=>({Key,Value}))))' "$json")"
  sync_imds_tags
  ACT=$(node -e "console.log(JSON.parse(process.argv[1])['$TAG_ACTIVATED'])" "$json")
}

# reuse_config AFFINITY USES [SECRET]: the config scale-up writes for a reusable pool's
# instance of REUSE_PROVIDER (the JIT config or the runner token: SECRET).
reuse_config() {
  local runner
  if [[ $REUSE_PROVIDER == gitlab ]]; then
    runner="\"provider\":\"gitlab\",\"url\":\"https://gitlab.example.test\",\"token\":\"${3:-glrt-reuse}\""
  else
    runner="\"provider\":\"github\",\"jitConfig\":\"${3:-jit-reuse}\""
  fi
  ctl POST /runner-config "{\"prefix\":\"$PREFIX\",\"config\":{$runner,\"reuse\":{\"affinity\":\"$1\",\"uses\":$2}}}" >/dev/null
}

# parked_state USES [AFFINITY]: the state a park after USES jobs leaves ($STATE/reuse).
parked_state() { printf '%s %s %s %s\n' "$INSTANCE_ID" 2026-12-01T00:00:00.000Z "${2:-$AFF}" "$1" >"$STATE_DIR/reuse"; }

# job SCRIPT: the job the runner runs (as the runner user), a bash script.
job() { printf '%s\n' "$1" >"$ROOT/calls/runner-job"; }

assert_parked() {
  local uses=$1 tags
  grep -qF "cleaned and parked with $AFF after $uses jobs; powering off" "$ROOT/out"
  called shutdown '-h now'
  [ "$(instance_state)" = running ]
  tags=$(moto_tags)
  grep -qx "$TAG_AFFINITY=$AFF" <<<"$tags"
  grep -qx "$TAG_USES=$uses" <<<"$tags"
  grep -qx "$TAG_WARM=$WARM_VALUE" <<<"$tags"
  for key in "$TAG_ACTIVATED" "$TAG_TRACE" "$TAG_JOB" "$TAG_RUNNER_ID" "$TAG_JOB_STARTED" "$TAG_IDLE_SINCE"; do
    refute grep -q "^$key=" <<<"$tags"
  done
  # The parking tag stays, naming the finished activation: the pool bounds the power-off by it.
  grep -qE "^$TAG_PARKING=$ACT [0-9T:.-]+Z\$" <<<"$tags"
  [ "$(cat "$STATE_DIR/reuse")" = "$INSTANCE_ID $ACT $AFF $uses" ]
  [ ! -e "$STATE_DIR/run-began" ]
  [ -L "$ROOT/etc/systemd/system/multi-user.target.wants/$UNIT_NAME" ]
  refute param_exists
}

assert_refused() {
  [ "$status" -ne 0 ]
  grep -qF "$1" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  [ ! -e "$ROOT/calls/shutdown" ]
  moto_tags | grep -q "^$TAG_START_FAILURE=RUN failed"
}
