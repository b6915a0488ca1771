#!/bin/bash
# The start logic of a runner instance, run on every boot: by cloud-init on the first boot
# (inside the user data, templates/user-data.sh) and by the systemd hook on later boots.
#
# lib/user-data.ts renders it: every @@NAME@@ placeholder becomes a shell-quoted value from
# the contract (lambdas/shared/contract) or the pool's settings, and full-line comments and
# indentation are dropped to stay under EC2's 16 KB user-data limit. Only the lines from the
# begin marker to the end marker (both included) are rendered; PRIME copies exactly those
# lines out of the running file into the hook, so the block must stay self-contained.
#
# Modes (docs/boot-modes.md):
#   RUN   the runner config parameter for this instance exists: start the runner, then terminate.
#   PRIME tagged warm standby and not activated: install the hook (and the runner, when the
#         image lacks it), prepare, power off.
#   WAIT  anything else: poll for the config parameter within a bound, then fail.
#
# Needs bash 5 (EPOCHREALTIME), curl, the aws CLI (installed where missing: ensure_aws_cli), what the install step needs when the image
# lacks the runner (templates/install-runner.sh), flock, timeout, systemctl, runuser, getent,
# install, id, dd, wc, tail, tr, and for an empty PRE_READ_DEVICE findmnt and lsblk.
# >>> cdk-warm-runners start logic: begin >>>
set -euo pipefail
umask 022
export TZ=UTC
# In order: the contract (rendered from lambdas/shared/contract); the pool's settings; time
# bounds; host paths and endpoints. The renderer joins continued lines (size).
readonly MODE_RUN=@@MODE_RUN@@ MODE_PRIME=@@MODE_PRIME@@ MODE_WAIT=@@MODE_WAIT@@ GITHUB=@@PROVIDER_GITHUB@@ \
  TAG_WARM=@@TAG_WARM_STANDBY@@ WARM_VALUE=@@WARM_STANDBY_VALUE@@ TAG_ACTIVATED=@@TAG_ACTIVATED_AT@@ TAG_TRACE=@@TAG_TRACE_ID@@ \
  TAG_STARTED=@@TAG_JOB_STARTED@@ TAG_FAILED=@@TAG_START_FAILURE@@ JOB_LINE=@@JOB_START_LINE@@ \
  CONFIG_ROOT=@@RUNNER_CONFIG_ROOT@@ CONFIG_VERSION=@@RUNNER_CONFIG_VERSION@@ \
  K_VERSION=@@KEY_VERSION@@ K_PROVIDER=@@KEY_PROVIDER@@ K_INSTANCE=@@KEY_INSTANCE@@ K_JIT=@@KEY_JITCONFIG@@ K_URL=@@KEY_URL@@ K_TOKEN=@@KEY_TOKEN@@ \
  L_MODE=@@LOG_KEY_MODE@@ L_TRACE=@@LOG_KEY_TRACE@@ L_LATENCY=@@LOG_KEY_LATENCY@@ ID_RE=@@INSTANCE_ID_RE@@ \
  TAG_POOL=@@TAG_POOL@@ L_POOL=@@LEDGER_KEY_POOL@@ L_STAGE=@@LEDGER_KEY_STAGE@@ L_SECS=@@LEDGER_KEY_SECONDS@@ \
  S_BOOT=@@STAGE_BOOT_BEGAN@@ S_RUNNER=@@STAGE_RUNNER_STARTED@@ S_JOB=@@STAGE_JOB_TAKEN@@ \
  LOG_GROUP=@@LOG_GROUP@@ \
  PROVIDER=@@PROVIDER@@ RUNNER_USER=@@RUNNER_USER@@ RUNNER_DIR=@@RUNNER_DIR@@ \
  GITLAB_BIN=@@GITLAB_RUNNER_BIN@@ GITLAB_WAIT=@@RUNNER_WAIT_TIMEOUT@@ \
  GL_EXECUTOR=@@GITLAB_EXECUTOR@@ GL_IMAGE=@@DOCKER_IMAGE@@ GL_PRIVILEGED=@@DOCKER_PRIVILEGED@@ GL_PULL=@@DOCKER_PULL_POLICY@@ \
  WAIT_SECONDS=@@WAIT_SECONDS@@ POLL=@@POLL_SECONDS@@ DELAY=@@RETRY_DELAY_SECONDS@@ \
  IMDS_TRIES=@@IMDS_ATTEMPTS@@ AWS_TRIES=@@AWS_ATTEMPTS@@ HTTP_TIMEOUT=@@HTTP_TIMEOUT_SECONDS@@ \
  CONNECT=@@AWS_CONNECT_TIMEOUT@@ READ=@@AWS_READ_TIMEOUT@@ CLI_TRIES=@@AWS_CLI_MAX_ATTEMPTS@@ SHIP_SECONDS=@@LOG_SHIP_SECONDS@@ \
  UNIT_DIR=@@UNIT_DIR@@ UNIT=@@UNIT_NAME@@ HOOK=@@HOOK_PATH@@ STATE=@@STATE_DIR@@ LOG_FILE=@@LOG_FILE@@ \
  MACHINE_ID=@@MACHINE_ID_FILE@@ PRE_READ=@@PRE_READ_DEVICE@@ DMI_ID=@@DMI_ASSET_TAG_FILE@@ UUID_SRC=@@RANDOM_UUID_FILE@@ \
  IMDS=@@IMDS_ENDPOINT@@ AWS=@@AWS_CLI@@ AWS_URL=@@AWS_ENDPOINT_URL@@ \
  BEGIN=@@BEGIN_MARKER@@ END=@@END_MARKER@@ \
  UNIT_TEXT=@@UNIT_TEXT@@ \
  REUSE=@@REUSE@@ MAX_JOBS=@@REUSE_MAX_JOBS@@ MAX_AGE=@@REUSE_MAX_AGE_SECONDS@@ AFFINITY_RE=@@AFFINITY_RE@@ \
  TAG_AFFINITY=@@TAG_AFFINITY@@ TAG_USES=@@TAG_USES@@ TAG_PARKING=@@TAG_PARKING@@ TAG_JOB=@@TAG_JOB_ID@@ \
  TAG_RUNNER=@@TAG_RUNNER_ID@@ TAG_IDLE=@@TAG_IDLE_SINCE@@ K_AFFINITY=@@KEY_AFFINITY@@ K_USES=@@KEY_USES@@ \
  RUNNER_HOME=@@RUNNER_HOME@@ CA=@@CA_PARAMETER@@ CA_SUM=@@CA_SHA256@@
# shellcheck disable=SC2016 # literals for bash -c, expanded when they run
PREPARE=(@@PREPARE_COMMANDS@@)
# Reuse (docs/boot-modes.md, "Reuse"): what survives a job, and the temp directories emptied after it.
CACHES=(@@CACHE_DIRECTORIES@@) TEMPS=(@@TEMP_DIRECTORIES@@)
# The docker executor's volumes (the pool's docker.volumes).
GL_VOLUMES=(@@DOCKER_VOLUMES@@)

MODE='' TRACE='' WARM=0 TAGS_READ=0 ACTIVATED='' ID='' REGION='' PARAM='' TOKEN='' OUT='' ERR=''
CONFIG='' JIT='' URL='' RTOKEN='' FAILED='' ENDING=0 DISABLER='' DEADLINE=0 BOUND=WAIT HELD=0 RAN=0 LOG_START=0
POOL='' ACT_MS='' SINCE='' T0=${EPOCHREALTIME-} T1=''
CAFF='' CUSES='' PARK=0 STALE='' FIRST=0 RUNNER_OUT=''
FINAL='\(ParameterNotFound\)'
# The CLI fetches its credentials from IMDS with its own bounds (1 s, one attempt): it gets
# this script's timeout instead, in the whole seconds it takes, and at most 3 attempts (each
# CLI call fetches anew, so IMDS_TRIES there would multiply into every call of AWS_TRIES).
MD_WAIT=${HTTP_TIMEOUT%.*} MD_TRIES=$((IMDS_TRIES < 3 ? IMDS_TRIES : 3))
[[ $HTTP_TIMEOUT != *.* ]] || MD_WAIT=$((${MD_WAIT:-0} + 1))

# Every line carries the trace id once the tags named one, except on a PRIME boot. It starts
# with its UTC time to the millisecond: ship_logs gives CloudWatch that time as the event's.
log() {
  local line t=$EPOCHREALTIME
  printf -v line '%(%Y-%m-%dT%H:%M:%S)T.%sZ start-runner[%s]:%s %s' "${t%[.,]*}" "${t: -6:3}" $$ "${TRACE:+ $L_TRACE=$TRACE}" "$*"
  printf '%s\n' "$line" >&2
  printf '%s\n' "$line" >>"$LOG_FILE" 2>/dev/null || true
}
fail() {
  FAILED=$*
  log "error: $*"
  exit 1
}

# The install step (templates/install-runner.sh): install_runner puts the runner user and the
# pinned runner release on an image that lacks them, and does nothing on one that has them.
@@INSTALL_RUNNER@@

# imds PATH [PUT]: 0 with OUT set, 1 when IMDS answers 404, 2 when it does not answer after
# the retries (the metadata service may lag the first second of a boot).
# Never through a proxy the environment may name: IMDS is link-local.
imds() {
  local i code
  local -a h=(-H "X-aws-ec2-metadata-token: $TOKEN")
  [[ ${2-} != PUT ]] || h=(-X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600')
  for ((i = 1; i <= IMDS_TRIES; i++)); do
    OUT=$(curl -s --noproxy '*' --max-time "$HTTP_TIMEOUT" -w '\n%{http_code}' "${h[@]}" "$IMDS/latest/$1") || OUT=$'\n000'
    code=${OUT##*$'\n'} OUT=${OUT%$'\n'*}
    [[ $code == 200 ]] && return 0
    [[ $code == 404 ]] && return 1
    log "IMDS $1 answered $code (attempt $i/$IMDS_TRIES)"
    ((i == IMDS_TRIES)) || sleep "$DELAY"
  done
  return 2
}

# tag KEY: 0 with OUT set, 1 when the instance has no such tag.
tag() {
  local rc=0
  imds "meta-data/tags/instance/$1" || rc=$?
  ((rc < 2)) || fail "IMDS did not answer for tag $1"
  return $rc
}

# The instance id and region. On Nitro the instance id is in DMI (EC2 user guide, "Detect
# whether a host is an EC2 instance"): when it matches the id an earlier boot cached, the
# cached region is reused and this boot saves an IMDS request. A clone has another id and
# reads the identity document again.
read_identity() {
  local dmi='' k v cid='' creg='' tmp sp=' *'
  [[ ! -r $DMI_ID ]] || read -r dmi <"$DMI_ID" || true
  if [[ -r $STATE/identity ]]; then
    while IFS='=' read -r k v; do
      case $k in id) cid=$v ;; region) creg=$v ;; esac
    done <"$STATE/identity"
  fi
  if [[ $dmi =~ $ID_RE && $dmi == "$cid" && -n $creg ]]; then
    ID=$dmi REGION=$creg
    return
  fi
  imds dynamic/instance-identity/document || fail "no instance identity document from IMDS"
  [[ $OUT =~ \"instanceId\"$sp:$sp\"(i-[0-9a-f]+)\" ]] && ID=${BASH_REMATCH[1]}
  [[ $OUT =~ \"region\"$sp:$sp\"([a-z0-9-]+)\" ]] && REGION=${BASH_REMATCH[1]}
  [[ $ID =~ $ID_RE && -n $REGION ]] || fail "the identity document lacks instanceId or region"
  tmp=$(mktemp "$STATE/identity.XXXXXX")
  printf 'id=%s\nregion=%s\n' "$ID" "$REGION" >"$tmp"
  mv -f "$tmp" "$STATE/identity"
}

# Reads only the tags the mode needs: an activated instance (the warm path) needs the
# activation time and the trace id, nothing else.
read_tags() {
  local rc=0
  if tag "$TAG_ACTIVATED"; then
    # Activated: a warm standby scale-up started, or a cold launch (tagged so at launch). Which
    # one matters only if the boot fails before a mode (on_exit asks then), not on the warm path.
    ACTIVATED=$OUT
    ! tag "$TAG_TRACE" || TRACE=$OUT
  else
    # The listing tells "no such tag" from "tags not in instance metadata" (then all are 404).
    imds meta-data/tags/instance || rc=$?
    ((rc < 2)) || fail "IMDS did not answer for the tag listing"
    ((rc == 0)) || fail "instance tags are not in instance metadata: enable InstanceMetadataTags in the launch template"
    local keys=$'\n'$OUT$'\n'
    # Decided by the value (the contract's WARM_STANDBY_VALUE), not by the key being there.
    [[ $keys != *$'\n'"$TAG_WARM"$'\n'* ]] || standby_tag || fail "IMDS did not answer for tag $TAG_WARM"
    if ((!WARM)) && [[ $keys == *$'\n'"$TAG_TRACE"$'\n'* ]] && tag "$TAG_TRACE"; then TRACE=$OUT; fi
  fi
  # Printed on every line: keep it one safe token.
  TRACE=${TRACE//[^A-Za-z0-9._:-]/_}
  TAGS_READ=1
}

# Sets WARM from the standby tag's value (the contract's WARM_STANDBY_VALUE), not from
# the key being there: 0 when read (either way), 1 when IMDS did not answer.
standby_tag() {
  local rc=0
  imds "meta-data/tags/instance/$TAG_WARM" || rc=$?
  ((rc < 2)) || return 1
  ((rc)) || [[ $OUT != "$WARM_VALUE" ]] || WARM=1
}

# aws_try WHAT ARGS...: the aws CLI with bounded retries. 0 with OUT set (kept in memory:
# it may be the secret), 1 on a final answer with ERR set (an error matching FINAL, which
# the caller may set locally: by default ParameterNotFound; the boot log's calls add their
# own), 2 when every attempt failed. Only ParameterNotFound means "no config":
# throttling or a network that is not up yet must never be read as WAIT or PRIME. Every call
# is time-bounded (the CLI's defaults are a 60 s read timeout and up to 5 attempts), its
# credential fetch from IMDS too (MD_WAIT); the retry settings are given to this call only,
# never exported (the runner starts from this shell).
# With DEADLINE set (WAIT, log shipping), no attempt starts after it and a hanging call is
# killed there.
aws_try() {
  local what=$1 i rc f left
  local -a lim=()
  shift
  for ((i = 1; i <= AWS_TRIES; i++)); do
    if ((DEADLINE)); then
      left=$((DEADLINE - SECONDS))
      ((left > 0)) || return 2
      lim=(timeout -k 1 "$left")
    fi
    f=$(mktemp)
    rc=0
    OUT=$(AWS_PAGER='' AWS_EC2_METADATA_SERVICE_ENDPOINT=$IMDS AWS_METADATA_SERVICE_TIMEOUT=$MD_WAIT \
      AWS_METADATA_SERVICE_NUM_ATTEMPTS=$MD_TRIES AWS_MAX_ATTEMPTS=$CLI_TRIES AWS_RETRY_MODE=standard \
      "${lim[@]}" "$AWS" ${AWS_URL:+--endpoint-url "$AWS_URL"} --cli-connect-timeout "$CONNECT" \
      --cli-read-timeout "$READ" --region "$REGION" "$@" 2>"$f") || rc=$?
    ERR=$(<"$f")
    rm -f "$f"
    ((rc)) || return 0
    # Only timeout exits 124 (the CLI's own codes are 0-2, 130 and 252-255).
    ((rc != 124)) || ERR="stopped at the $BOUND bound $ERR"
    ERR=${ERR//$'\n'/ }
    [[ ! $ERR =~ $FINAL ]] || return 1
    log "$what failed (attempt $i/$AWS_TRIES): ${ERR:0:300}"
    ((i == AWS_TRIES)) || sleep "$DELAY"
  done
  return 2
}

# The time of a log line (its leading YYYY-MM-DDTHH:MM:SS[.mmm]Z) in ms since the epoch, in
# TS: days from the civil date (Hinnant's algorithm), builtins only.
line_time() {
  local y m d
  [[ $1 =~ ^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.([0-9]{3}))?Z ]] || return 1
  y=${BASH_REMATCH[1]} m=$((10#${BASH_REMATCH[2]})) d=$((10#${BASH_REMATCH[3]}))
  ((m > 2)) || ((y -= 1, m += 12))
  TS=$(((365 * y + y / 4 - y / 100 + y / 400 + (153 * (m - 3) + 2) / 5 + d - 719469) * 86400))
  TS=$(((TS + 10#${BASH_REMATCH[4]} * 3600 + 10#${BASH_REMATCH[5]} * 60 + 10#${BASH_REMATCH[6]}) * 1000 + 10#${BASH_REMATCH[8]:-0}))
}

# Sends the lines of LOG_FILE not sent yet to this instance's stream, one put-log-events per
# batch. PutLogEvents takes events in time order, at most 10,000 and 1,048,576 bytes (26 per
# event plus the message) per call, spanning at most 24 hours, none older than 14 days
# (CloudWatch Logs API reference): batches stay well inside that; older lines are skipped,
# a clock stepped back repeats the previous time. $STATE/log-sent holds "<id> <bytes sent>":
# written after each accepted batch, so a later call (or boot) sends only newer lines. Runs
# in a subshell (ship_logs): nothing here may end the boot.
ship() {
  local sid='' sent=0 size=0 end line n bytes prev first now oldest events tmp rc TS bs=\\ q=\" LC_ALL=C
  # Answers no retry changes: the group or stream is missing, or CloudWatch (or the CLI's own
  # validation) refuses the batch itself, which would fail the same way every time.
  local FINAL='\((ResourceAlreadyExistsException|ResourceNotFoundException|InvalidParameterException)\)|Parameter validation failed'
  ERR=''
  [[ ! -r $STATE/log-sent ]] || read -r sid sent <"$STATE/log-sent" || true
  # main wrote it for this instance; if that failed, only this boot's lines are known ours.
  [[ $sid == "$ID" && $sent =~ ^[0-9]+$ ]] || sent=$LOG_START
  size=$(wc -c <"$LOG_FILE") || return 1
  ((sent <= size)) || sent=0
  ((sent < size)) || return 0
  sid=''
  [[ ! -r $STATE/log-stream ]] || read -r sid <"$STATE/log-stream" || true
  if [[ $sid != "$ID" ]]; then
    rc=0
    aws_try "creating log stream $ID in $LOG_GROUP" logs create-log-stream --log-group-name "$LOG_GROUP" \
      --log-stream-name "$ID" >/dev/null || rc=$?
    ((rc == 0)) || [[ $ERR == *'(ResourceAlreadyExistsException)'* ]] || return 1
    printf '%s\n' "$ID" >"$STATE/log-stream"
  fi
  now=${EPOCHREALTIME//[!0-9]/}
  oldest=$((now / 1000 - 13 * 86400000))
  while ((sent < size)); do
    events='' n=0 bytes=0 prev=0 first=0 end=$sent
    # read fails on a last line without its newline yet: it waits for the next call.
    while IFS= read -r line; do
      ((n < 1000 && bytes < 262144)) || break
      line_time "$line" || TS=$prev
      ((TS >= prev)) || TS=$prev
      ((n == 0 || TS - first < 82800000)) || break
      end=$((end + ${#line} + 1))
      # An event needs a message of at least one byte; an empty line would fail its batch.
      [[ -n $line ]] || continue
      ((TS >= oldest)) || continue
      ((n)) || first=$TS
      prev=$TS
      # JSON string; bytes outside printable ASCII become "?" so the batch is always valid.
      line=${line//"$bs"/"$bs$bs"} line=${line//"$q"/"$bs$q"} line=${line//[^[:print:]]/?}
      events+="${events:+,}{\"timestamp\":$TS,\"message\":\"$line\"}"
      ((n += 1, bytes += ${#line} + 26))
    # tr: read drops NUL bytes (a crash can leave a run of them), which would shift the offset.
    done < <(tail -c +$((sent + 1)) "$LOG_FILE" | tr '\0' '?')
    ((end > sent)) || return 0
    if ((n)); then
      tmp=$(mktemp) || return 1
      printf '[%s]' "$events" >"$tmp"
      rc=0
      aws_try "sending $n log lines to $LOG_GROUP" logs put-log-events --log-group-name "$LOG_GROUP" \
        --log-stream-name "$ID" --log-events "file://$tmp" >/dev/null || rc=$?
      rm -f "$tmp"
      # A stream deleted since it was created is created again next time.
      [[ $ERR != *'(ResourceNotFoundException)'* ]] || { rm -f "$STATE/log-stream" && return 1; }
      ((rc < 2)) || return 1
      # A refused batch is dropped: kept, it would block every later line of this instance.
      ((rc == 0)) || log "warning: CloudWatch Logs refused $n log lines, dropped: ${ERR:0:300}"
    fi
    sent=$end
    printf '%s %s\n' "$ID" "$sent" >"$STATE/log-sent.$$" && mv -f "$STATE/log-sent.$$" "$STATE/log-sent"
  done
}

# Ships the boot's new log lines to CloudWatch (the fleet's log group, one stream per
# instance): no agent needed on the AMI. Best effort and bounded: at most SHIP_SECONDS, in a
# subshell whose failures are logged here (and shipped next time) and otherwise ignored.
ship_logs() {
  [[ -n $ID && -n $REGION ]] || return 0
  (
    DEADLINE=$((SECONDS + SHIP_SECONDS)) BOUND='log shipping'
    ship || log "warning: boot log not (fully) shipped to $LOG_GROUP (${ERR:0:300}); the rest goes with the next shipping"
  ) 9>&- || true
}

get_config() {
  local rc=0
  aws_try "reading $PARAM" ssm get-parameter --name "$PARAM" --with-decryption \
    --query Parameter.Value --output text || rc=$?
  CONFIG=$OUT OUT=''
  # Read: whatever happens next, the parameter must not outlive this boot (on_exit).
  ((rc)) || HELD=1
  return $rc
}

# Parses encodeRunnerConfig's key=value lines with builtins. The values are secrets: errors
# name the field, never the value.
parse_config() {
  local rest=$CONFIG line ver='' prov='' inst=''
  CONFIG=''
  while [[ -n $rest ]]; do
    line=${rest%%$'\n'*}
    [[ $rest == *$'\n'* ]] && rest=${rest#*$'\n'} || rest=''
    [[ -n $line ]] || continue
    [[ $line == ?*=* ]] || fail "$PARAM has a line without key="
    case ${line%%=*} in
      "$K_VERSION") ver=${line#*=} ;;
      "$K_PROVIDER") prov=${line#*=} ;;
      "$K_INSTANCE") inst=${line#*=} ;;
      "$K_JIT") JIT=${line#*=} ;;
      "$K_URL") URL=${line#*=} ;;
      "$K_TOKEN") RTOKEN=${line#*=} ;;
      "$K_AFFINITY") CAFF=${line#*=} ;;
      "$K_USES") CUSES=${line#*=} ;;
    esac
  done
  # Defence in depth beside IAM: a config written under this name for another instance holds
  # that one's secret, and every scale-up writes the field, so a config that names no instance
  # was not written for this one either. Both are refused, and nothing of them deleted (on_exit).
  if [[ $inst != "$ID" ]]; then
    HELD=0
    inst=${inst//[^A-Za-z0-9-]/_} inst=${inst:0:32}
    fail "$PARAM names instance ${inst:-(none)}, not $ID: refused, not deleted, no runner started"
  fi
  [[ $ver == "$CONFIG_VERSION" ]] || fail "$PARAM is not version $CONFIG_VERSION"
  [[ $prov == "$PROVIDER" ]] || fail "$PARAM is not for this pool's provider $PROVIDER"
  if [[ $PROVIDER == "$GITHUB" ]]; then
    [[ -n $JIT ]] || fail "$PARAM lacks $K_JIT"
  else
    [[ $URL =~ ^https?:// && -n $RTOKEN ]] || fail "$PARAM lacks an http(s) $K_URL or $K_TOKEN"
  fi
}

# Seconds from the activation tag (ISO 8601 UTC as toISOString writes it) to $1 (an
# EPOCHREALTIME; now by default), in SINCE. GNU date reads the whole string; BSD date has no -d
# and its -f must match exactly, so it gets the string without the fractional seconds and the
# trailing Z, and the fraction is added here. Parsed once (ACT_MS): later calls fork nothing.
since_activated() {
  local base frac secs t=${1:-$EPOCHREALTIME} d sign=''
  [[ -n $ACTIVATED ]] || return 1
  if [[ -z $ACT_MS ]]; then
    ACT_MS=x
    if [[ $ACTIVATED =~ ^([0-9-]{10}T[0-9:]{8})(\.([0-9]+))?Z$ ]]; then
      base=${BASH_REMATCH[1]} frac=${BASH_REMATCH[3]}000
      secs=$(date -u -d "$ACTIVATED" +%s 2>/dev/null) ||
        secs=$(date -j -u -f %Y-%m-%dT%H:%M:%S "$base" +%s 2>/dev/null) || secs=''
      [[ ! $secs =~ ^[0-9]+$ ]] || ACT_MS=$((secs * 1000 + 10#${frac:0:3}))
    fi
    [[ $ACT_MS != x ]] || log "warning: $TAG_ACTIVATED is no ISO 8601 UTC time: no ledger or latency line"
  fi
  [[ $ACT_MS != x ]] || return 1
  t=${t//[!0-9]/}
  d=$((t / 1000 - ACT_MS))
  if ((d < 0)); then sign=- d=$((-d)); fi
  SINCE=$sign$((d / 1000)).$(printf %03d $((d % 1000)))
}

# ledger STAGE [TIME]: the job's latency ledger line for an instance stage (contract ledger.ts):
# pool, stage and seconds since activation, nothing else. Called off the runner's start path:
# the pool tag is read only here, once: the value goes to $STATE/pool with this instance's id
# (through a temporary file and mv, so a reader never sees half a line), where the job watcher
# (another process, forked before the first read) takes it with a builtin; it reads IMDS itself
# only if its job came first. A missing (404) or empty tag is `unresolved`, kept as any value:
# the line's pool field must not be empty. Unanswered IMDS leaves it for the next line.
ledger() {
  local id='' pool='' rc=0
  since_activated "${2-}" || return 0
  if [[ -z $POOL && -r $STATE/pool ]] && read -r id pool <"$STATE/pool" && [[ $id == "$ID" && -n $pool ]]; then POOL=$pool; fi
  if [[ -z $POOL ]]; then
    imds "meta-data/tags/instance/$TAG_POOL" || rc=$?
    if ((rc < 2)); then
      if ((rc == 0)); then POOL=${OUT//[^A-Za-z0-9_-]/_}; fi
      POOL=${POOL:-unresolved}
      { printf '%s %s\n' "$ID" "$POOL" >"$STATE/pool.$BASHPID" && mv -f "$STATE/pool.$BASHPID" "$STATE/pool"; } 2>/dev/null || rm -f "$STATE/pool.$BASHPID"
    fi
  fi
  log "$L_POOL=${POOL:-unresolved} $L_STAGE=$1 $L_SECS=$SINCE"
}

# An activated instance must not start a second runner when it reboots: the marker is
# written before the runner starts (main stops at it), and the unit is disabled off the
# critical path (--no-reload: only the next boot needs to see it).
disable_hook() {
  # With the activation: on a reusable instance a marker of another one is a job in progress.
  printf '%s %s\n' "$ID" "$ACTIVATED" >"$STATE/run-began"
  [[ -e $UNIT_DIR/$UNIT ]] || return 0
  { systemctl disable --no-reload "$UNIT" &>/dev/null || log "warning: could not disable $UNIT"; } &
  DISABLER=$!
}

# Warm standbys are copies of one image: GitLab derives the runner's system id from this.
new_machine_id() {
  local u=''
  read -r u <"$UUID_SRC" || true
  u=${u//-/}
  [[ $u =~ ^[0-9a-f]{32}$ ]] || fail "no random UUID in $UUID_SRC"
  printf '%s\n' "$u" >"$MACHINE_ID.$$"
  mv -f "$MACHINE_ID.$$" "$MACHINE_ID"
}

# After the install step: what it installed, or what the image brought.
check_runner() {
  local bin=$GITLAB_BIN
  [[ $PROVIDER != "$GITHUB" ]] || bin=$RUNNER_DIR/run.sh
  [[ -x $bin ]] || fail "no $PROVIDER runner at $bin after the install step"
  getent passwd "$RUNNER_USER" >/dev/null || fail "no user $RUNNER_USER to run the runner as"
}

# Runs in a subshell: the runner as the runner user with a clean environment. The job
# inherits that environment, so the secret goes in as an argument and nothing of this
# script goes along.
start_runner() {
  local home v
  local -a cmd env
  home=$(runner_home) || exit 1
  env=(HOME="${home:-$RUNNER_DIR}" USER="$RUNNER_USER" LOGNAME="$RUNNER_USER" LANG="${LANG:-C.UTF-8}"
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  cmd=("$RUNNER_DIR/run.sh" --jitconfig "$JIT")
  if [[ $PROVIDER != "$GITHUB" ]]; then
    cmd=("$GITLAB_BIN" run-single --url "$URL" --token "$RTOKEN" --executor "$GL_EXECUTOR" --max-builds 1
      --wait-timeout "$GITLAB_WAIT" --builds-dir "$RUNNER_DIR/builds")
    # gitlab-runner's [runners.docker] settings as flags (its config.go, namespace docker);
    # --docker-privileged is a flag without a value.
    if [[ $GL_EXECUTOR == docker ]]; then
      cmd+=(--docker-image "$GL_IMAGE" --docker-pull-policy "$GL_PULL")
      ((!GL_PRIVILEGED)) || cmd+=(--docker-privileged)
      for v in ${GL_VOLUMES[@]+"${GL_VOLUMES[@]}"}; do cmd+=(--docker-volumes "$v"); done
    fi
    mkdir -p "$RUNNER_DIR/builds"
    chown "$RUNNER_USER" "$RUNNER_DIR/builds"
  fi
  cd "$RUNNER_DIR"
  # The lock stays with this script, not with the job.
  exec 9>&-
  ((EUID != 0)) || exec runuser -u "$RUNNER_USER" -- env -i "${env[@]}" "${cmd[@]}"
  exec env -i "${env[@]}" "${cmd[@]}"
}

# Passes the runner's output on unchanged and, at the line the runner writes when it takes its
# job (the contract's JOB_START_LINES), tags this instance with the time, once and in the
# background: the scale-down never reclaims as idle a runner whose instance says it works,
# whatever the CI service reports. The line comes from the runner's own dispatch (no polling,
# both providers alike); a missed line only leaves the two-readings rule. It reads the
# runner's output file (watch_output), never a pipe from the runner: were it to die, the runner
# would not (a writer to a pipe without a reader gets SIGPIPE or EPIPE).
watch_job() {
  local line seen=0 at t
  # Forked after the config was parsed: this process must not keep the runner's secret.
  CONFIG='' JIT='' URL='' RTOKEN=''
  log "watching the runner's output (watcher $BASHPID)"
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%s\n' "$line" 2>/dev/null || true
    ((!seen)) || continue
    [[ $line == *"$JOB_LINE"* ]] || continue
    seen=1 t=$EPOCHREALTIME
    printf -v at '%(%Y-%m-%dT%H:%M:%S)TZ' -1
    {
      ledger "$S_JOB" "$t"
      tag_job_started "$at"
    } &
  done
  wait || true
}

# watch_output PID: follows $RUNNER_OUT from its start until the runner (PID) has exited and its
# last lines are read (tail --pid), through watch_job. If the watcher ends early the runner
# keeps writing to its file, and the file keeps the lines nobody relayed.
watch_output() {
  tail -n +1 -F --pid="$1" "$RUNNER_OUT" 2>/dev/null | watch_job
}

readonly JOB_TAG_ROUNDS=6
# tag_job_started TIME: CreateTags of the report that the job started, retried past one aws_try in
# rounds DELAY x 2, x 4 ... x 2^JOB_TAG_ROUNDS apart (about 2 minutes with a 1 s DELAY): a
# network or an API throttled for a while must not cost the instance its report for the whole
# job. CreateTags with the same value is idempotent, so a round whose answer was lost is safe
# to repeat. In the background: the runner works meanwhile.
tag_job_started() {
  local at=$1 round ms gap
  ms=$(delay_ms)
  for ((round = 0; round <= JOB_TAG_ROUNDS; round++)); do
    if ((round)); then
      gap=$((ms << round))
      sleep "$((gap / 1000)).$(printf '%03d' $((gap % 1000)))"
    fi
    if aws_try "tagging $ID $TAG_STARTED" ec2 create-tags --resources "$ID" --tags "Key=$TAG_STARTED,Value=$at" >/dev/null; then
      log "job started: tagged $TAG_STARTED=$at"
      return 0
    fi
    log "warning: $TAG_STARTED not tagged in round $((round + 1))/$((JOB_TAG_ROUNDS + 1)) (${ERR:0:300})"
  done
  log "warning: $TAG_STARTED not tagged; scale-down has only the CI service's readings"
  return 1
}

# DELAY (seconds, a decimal such as 0.1 or 299.999) in whole milliseconds, builtins only.
delay_ms() {
  local int=${DELAY%%.*} frac=000
  [[ $DELAY != *.* ]] || frac="${DELAY#*.}000"
  echo $((10#${int:-0} * 1000 + 10#${frac:0:3}))
}

# Runs in a subshell. "Not found" counts as deleted.
delete_config() {
  local rc=0
  aws_try "deleting $PARAM" ssm delete-parameter --name "$PARAM" >/dev/null || rc=$?
  ((rc < 2)) || { log "warning: $PARAM not deleted; the scale-down sweep removes it" && exit 1; }
  log "deleted $PARAM"
}

# The log goes first: once the instance is terminating, nothing more may reach CloudWatch.
terminate() {
  ENDING=1
  log "terminating $ID"
  ship_logs
  aws_try "terminating $ID" ec2 terminate-instances --instance-ids "$ID" >/dev/null && return 0
  # No power-off instead: a stopped instance that ran a job must not look parked to the pool.
  log "error: could not terminate $ID; left for the scale-down sweep"
  ship_logs
  return 1
}

# The runner user's home: rendered (a sandbox maps it), else the user database's, without a
# trailing slash (the "$home"/* matches below).
runner_home() {
  local home=$RUNNER_HOME
  [[ -n $home ]] || IFS=: read -r _ _ _ _ _ home _ < <(getent passwd "$RUNNER_USER") || return 1
  while [[ $home == */ && $home != / ]]; do home=${home%/}; done
  printf '%s' "$home"
}

# R4, before anything of the job runs: resume only onto the state this instance parked with
# ($STATE/reuse: instance, activation it parked at, affinity, uses). Any doubt refuses the
# config: fail deletes it and terminates (on_exit); scale-up's retry serves the job elsewhere.
resume_check() {
  local id='' aff='' n='' d
  [[ ! -r $STATE/reuse ]] || read -r id _ aff n <"$STATE/reuse" || true
  # Another instance's (an image baked from a parked one) is not this one's state.
  [[ $id == "$ID" ]] || aff='' n=''
  [[ -z $STALE ]] || fail "the run-began marker of activation $STALE: a job may be in progress; refused"
  if ((!REUSE)) || [[ -z $CAFF$CUSES ]]; then
    [[ -z $aff ]] || fail "this instance parked with caches of $aff, but $PARAM or the pool has no reuse: refused"
    return 0
  fi
  [[ $CAFF =~ $AFFINITY_RE && $CUSES =~ ^[0-9]{1,6}$ ]] || fail "$PARAM has no valid $K_AFFINITY or $K_USES"
  if [[ -z $aff ]]; then
    ((10#$CUSES == 0)) || fail "$PARAM says $CUSES uses, but this instance has no reuse state: refused"
  else
    [[ $CAFF == "$aff" ]] || fail "$PARAM is for $CAFF, but this instance's caches are of $aff: refused"
    [[ $n =~ ^[0-9]{1,6}$ && $((10#$n)) == $((10#$CUSES)) ]] || fail "$PARAM says $CUSES uses, but this instance parked after $n: refused"
  fi
  # A fresh instance's first job fills them: run_mode creates them after the install step.
  if ((10#$CUSES > 0)); then
    for d in ${CACHES[@]+"${CACHES[@]}"}; do
      [[ -d $d && ! -L $d ]] || fail "cache directory $d is missing after $CUSES uses: refused"
    done
  fi
  PARK=1
  log "reuse: $CAFF, use $((10#$CUSES + 1)) of at most $MAX_JOBS"
}

# prune DIR: removes everything inside DIR but the cache directories and the way to them,
# never following a symbolic link (the job may have planted one).
prune() {
  local e c keep
  [[ ! -L $1 ]] || { rm -f -- "$1" && return 0; }
  [[ -d $1 ]] || return 0
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [[ -e $e || -L $e ]] || continue
    keep=0
    for c in ${CACHES[@]+"${CACHES[@]}"}; do
      [[ $e != "$c" ]] || { keep=1 && break; }
      [[ $c != "$e"/* ]] || keep=2
    done
    if ((keep)) && [[ -d $e && ! -L $e ]]; then
      ((keep == 1)) || prune "$e" || return 1
    else
      rm -rf -- "$e" || return 1
    fi
  done
}

# live UID: a process of UID runs. A zombie holds nothing of the job (no memory, no
# environment), and only PID 1 can reap an orphan: only live ones count.
live() {
  local s=''
  s=$(ps -U "$1" -o stat= 2>/dev/null) || true
  s=${s// /}
  [[ $'\n'$s =~ $'\n'[^Z] ]]
}

# Everything a job may leave for the next one but the cache directories (docs/security.md):
# the runner user's processes, Docker's containers, networks and volumes (its images stay),
# the workspace, the registration and the runner's output, temp files and the home.
clean() {
  local uid home d i
  uid=$(id -u "$RUNNER_USER") || return 1
  for ((i = 0; i < 20; i++)); do
    pkill -KILL -U "$uid" || true
    live "$uid" || break
    sleep "$DELAY"
  done
  ! live "$uid" || { log "processes of $RUNNER_USER survive KILL" && return 1; }
  # Images stay: they are the cache. Volumes by name, not `volume prune -a` (Docker 23 and
  # later only). Every call bounded: a hung daemon fails the cleaning, the instance terminates.
  # With the pool's Docker a daemon that does not answer may still hold the job's containers
  # (restarted beside the next job): that fails the cleaning too. Without it, no daemon ran any.
  if command -v docker >/dev/null; then
    if timeout -k 2 10 docker version --format '{{.Server.Version}}' &>/dev/null; then
      { timeout -k 2 60 docker ps -aq | xargs -r timeout -k 2 120 docker rm -f -v &&
        timeout -k 2 60 docker network prune -f &&
        timeout -k 2 60 docker volume ls -q | xargs -r timeout -k 2 120 docker volume rm -f; } >/dev/null || return 1
    elif ((I_DOCKER)); then
      log "the Docker daemon did not answer: not parking with what the job left in it" && return 1
    fi
  fi
  for d in _work _diag builds cache; do prune "$RUNNER_DIR/$d" || return 1; done
  rm -rf -- "$RUNNER_DIR"/.runner "$RUNNER_DIR"/.credentials* "$RUNNER_OUT" || return 1
  for d in ${TEMPS[@]+"${TEMPS[@]}"}; do prune "$d" || return 1; done
  home=$(runner_home) || return 1
  # Never a home that holds the runner or this script's state.
  if [[ -n $home && $home != / && $RUNNER_DIR/ != "$home"/* && $STATE/ != "$home"/* ]]; then
    prune "$home" || return 1
  elif [[ -n $home ]]; then
    log "the home $home of $RUNNER_USER holds the runner or the state: not cleaned" && return 1
  fi
  make_caches
}

# The cache directories that are missing, empty and the runner user's. In the runner's home
# the user creates them, every directory on the way too: a job may add ~/.cache/pip beside
# ~/.cache/<tool>, and root never writes where the user can plant a link. A home that does not
# exist (a user made with useradd -M or -r) root creates, the user's, in the root-owned /home.
# Elsewhere root creates the path and hands over the last directory only.
make_caches() {
  local d home
  home=$(runner_home) || return 1
  for d in ${CACHES[@]+"${CACHES[@]}"}; do
    [[ ! -L $d ]] || rm -f -- "$d" || return 1
    # A link planted on the way would have root create and hand over another directory.
    [[ $(realpath -m -- "$d") == "$d" ]] || { log "cache directory $d resolves elsewhere" && return 1; }
    [[ ! -d $d ]] || continue
    if [[ -n $home && $home != / && $d == "$home"/* ]]; then
      [[ -e $home || -L $home ]] || install -d -m 700 -o "$RUNNER_USER" -g "$(id -gn "$RUNNER_USER")" -- "$home" || return 1
      as_runner mkdir -p -- "$d" || return 1
    else
      { mkdir -p -- "$d" && chown "$RUNNER_USER:" "$d"; } || return 1
    fi
  done
}

# as_runner CMD...: CMD as the runner user (this script runs as root on EC2; a sandbox that is
# not root runs as that user already).
as_runner() {
  if ((EUID == 0)); then runuser -u "$RUNNER_USER" -- "$@"; else "$@"; fi
}

# Only scale-up writes the affinity tag (with the launch or the activation; the instance role
# cannot): the instance parks only under the affinity the tag names, the one its config and
# caches are of. A token fresh for the read: the job may have outlived the boot's.
own_affinity() {
  local rc=0
  imds api/token PUT && TOKEN=$OUT && imds "meta-data/tags/instance/$TAG_AFFINITY" || rc=$?
  ((rc != 2)) || { log "error: IMDS did not answer for tag $TAG_AFFINITY: not parking" && return 1; }
  ((rc == 0)) || { log "error: this instance has no $TAG_AFFINITY tag: not parking" && return 1; }
  [[ $OUT == "$CAFF" ]] || { log "error: this instance's $TAG_AFFINITY tag is ${OUT//[^A-Za-z0-9._:\/-]/_}, not $CAFF: not parking" && return 1; }
}

# After the job, on a reusable instance: limits, clean, tag, state, hook, power off (R5). 1 when
# the instance must terminate instead: a limit, a failed step, a tag not written, an affinity
# tag that is not the config's. The parking tag stays: its time bounds the pool's wait for the
# power-off; it names a finished activation.
park() {
  local n=$((10#$CUSES + 1)) now tmp t=$EPOCHREALTIME
  ((n < MAX_JOBS)) || { log "served $n of $MAX_JOBS jobs: not parking" && return 1; }
  ((EPOCHSECONDS - FIRST < MAX_AGE)) || { log "older than ${MAX_AGE}s: not parking" && return 1; }
  [[ $ACTIVATED =~ ^[0-9TZ:.-]+$ ]] || { log "no activation to name: not parking" && return 1; }
  own_affinity || return 1
  printf -v now '%(%Y-%m-%dT%H:%M:%S)T.%sZ' "${t%[.,]*}" "${t: -6:3}"
  aws_try "tagging $ID $TAG_PARKING" ec2 create-tags --resources "$ID" \
    --tags "[{\"Key\":\"$TAG_PARKING\",\"Value\":\"$ACTIVATED $now\"}]" >/dev/null ||
    log "warning: $TAG_PARKING not tagged (${ERR:0:300})"
  clean || { log "error: cleaning after the job failed" && return 1; }
  tmp=$(mktemp "$STATE/reuse.XXXXXX") && printf '%s %s %s %s\n' "$ID" "$ACTIVATED" "$CAFF" "$n" >"$tmp" &&
    mv -f "$tmp" "$STATE/reuse" || return 1
  # A cold launch has no hook yet; a hook boot enables its own again.
  if [[ ${BASH_SOURCE[0]} != "$HOOK" ]]; then install_hook; else systemctl enable "$UNIT" || return 1; fi
  aws_try "tagging $ID for reuse" ec2 create-tags --resources "$ID" --tags \
    "Key=$TAG_USES,Value=$n" "Key=$TAG_WARM,Value=$WARM_VALUE" >/dev/null || return 1
  aws_try "untagging $ID" ec2 delete-tags --resources "$ID" --tags "Key=$TAG_ACTIVATED" "Key=$TAG_TRACE" \
    "Key=$TAG_JOB" "Key=$TAG_RUNNER" "Key=$TAG_STARTED" "Key=$TAG_IDLE" >/dev/null || return 1
  rm -f "$STATE/run-began"
  log "cleaned and parked with $CAFF after $n jobs; powering off"
  ship_logs
  ENDING=1
  shutdown -h now || { ENDING=0 && log "error: shutdown failed" && return 1; }
}

run_mode() {
  local runner watcher deleter status=0
  MODE=$MODE_RUN
  log "$L_MODE=$MODE instance=$ID"
  disable_hook
  parse_config
  resume_check
  # A cold launch of a stock image pays the install here, before its runner starts; Docker
  # too, on the first boot only (a warm activation boots the hook, its instance has Docker);
  # then the prepare commands (which may use the runner), as PRIME runs them.
  install_cas
  install_runner
  [[ ${BASH_SOURCE[0]} == "$HOOK" ]] || install_docker
  prepare_once
  check_runner
  # After the install: on a stock image it creates the user the caches belong to.
  ((!PARK)) || make_caches || fail "cannot create the cache directories"
  new_machine_id
  # The tag is parsed first (date forks): the latency is taken as the runner starts.
  since_activated || true
  T1=$EPOCHREALTIME
  ! since_activated "$T1" || log "$L_LATENCY=$SINCE"
  log "starting the $PROVIDER runner"
  # The runner writes to a file of its own (0600: it is the runner's console), not to a pipe.
  RUNNER_OUT=$STATE/runner.out
  (umask 077 && : >"$RUNNER_OUT")
  start_runner >>"$RUNNER_OUT" 2>&1 &
  runner=$! RAN=1
  watch_output "$runner" 9>&- &
  watcher=$!
  JIT='' URL='' RTOKEN=''
  # Off the critical path: the runner is already starting. So is shipping the log (its
  # ledger lines feed the fleet's metrics), after the deletion: one aws CLI at a time beside
  # the starting runner, not two.
  delete_config &
  deleter=$! HELD=0
  wait $deleter || true
  ledger "$S_BOOT" "$T0"
  ledger "$S_RUNNER" "$T1"
  ship_logs
  wait $runner || status=$?
  # tail stops within a second of the runner's end, after its last lines; the watcher then waits
  # for its report that the job started, which retries for about 2 minutes when CreateTags keeps failing.
  wait "$watcher" || true
  log "runner exited with status $status"
  [[ -z $DISABLER ]] || wait "$DISABLER" || true
  # Every final state of the job alike (success, failure, cancel, deregistered, wait-timeout).
  if ((PARK)); then park || terminate; else terminate; fi
}

# The bound holds even when SSM hangs: aws_try stops at DEADLINE.
wait_mode() {
  local rc polls=0
  MODE=$MODE_WAIT
  log "$L_MODE=$MODE instance=$ID: no config yet, polling up to ${WAIT_SECONDS}s"
  # An image without the runner installs it first, then the prepare commands run: both
  # overlap the wait for the config instead of following it. The bound starts after them.
  install_cas
  install_runner
  [[ ${BASH_SOURCE[0]} == "$HOOK" ]] || install_docker
  prepare_once
  DEADLINE=$((SECONDS + WAIT_SECONDS))
  while ((SECONDS < DEADLINE)); do
    sleep "$POLL"
    rc=0
    ((++polls))
    get_config || rc=$?
    if ((rc == 0)); then
      DEADLINE=0
      run_mode
      return
    fi
  done
  DEADLINE=0
  fail "no runner config at $PARAM after ${WAIT_SECONDS}s ($polls polls)"
}

# Copies the block between the markers out of the running file ($0 is the user data on the
# first boot and the hook itself on a later prime) into a temporary file, then moves it over
# the hook: a redirect onto the running hook would truncate it before bash has read it.
install_hook() {
  local src=${BASH_SOURCE[0]} line state=0 tmp
  [[ -f $src ]] || fail "cannot read $src: run the user data as a file, as cloud-init does"
  mkdir -p "${HOOK%/*}" "$UNIT_DIR"
  tmp=$(mktemp "$HOOK.XXXXXX")
  {
    echo '#!/bin/bash'
    while IFS= read -r line || [[ -n $line ]]; do
      [[ $state == 1 || $line == "$BEGIN" ]] || continue
      state=1
      printf '%s\n' "$line"
      [[ $line != "$END" ]] || { state=2 && break; }
    done <"$src"
  } >"$tmp"
  if ((state != 2)); then
    rm -f "$tmp"
    ((state)) || fail "no begin marker in $src"
    fail "end marker missing in $src: refusing to install a truncated hook"
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "$HOOK"
  tmp=$(mktemp "$UNIT_DIR/$UNIT.XXXXXX")
  printf '%s' "$UNIT_TEXT" >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$UNIT_DIR/$UNIT"
  systemctl enable "$UNIT" || fail "systemctl enable $UNIT failed"
  log "enabled $UNIT running $HOOK"
}

# EBS volumes created from a snapshot load each block on its first read; reading the root
# volume through once while priming moves that cost out of the job's start.
pre_read() {
  local dev=$PRE_READ src
  if [[ -z $dev ]]; then
    src=$(findmnt -n -o SOURCE /) || fail "cannot find the root file system's device"
    dev=$(lsblk -n -d -o PKNAME "$src" 2>/dev/null) || true
    dev=${dev:+/dev/$dev}
    dev=${dev:-$src}
  fi
  log "reading $dev through once"
  dd if="$dev" of=/dev/null bs=1M status=none || fail "reading $dev failed"
}

# The pool's prepare commands, as root, in order; a failing one fails the boot. Then the
# instance is marked prepared (by its id: a disk cloned from another carries that one's mark).
prepare() {
  local i=0 cmd
  for cmd in ${PREPARE[@]+"${PREPARE[@]}"}; do
    log "prepare command $((++i))/${#PREPARE[@]}"
    bash -euo pipefail -c "$cmd" </dev/null || fail "prepare command $i failed"
  done
  printf '%s\n' "$ID" >"$STATE/prepared" || true
}

# A cold launch prepares before its runner starts, as PRIME does, so a job sees the same
# machine warm or cold; once per instance: not again on a warm activation, after a WAIT, nor
# for a reused instance's later jobs (docs/boot-modes.md, "Prepare commands").
prepare_once() {
  local id=''
  [[ ! -r $STATE/prepared ]] || read -r id <"$STATE/prepared" || true
  [[ $id == "$ID" ]] || prepare
}

# The fleet's extra CA certificates (docs/private-network.md) into the OS trust store, before
# anything talks TLS to the CI server; once per instance (a warm activation finds them on its
# disk). Installed only when their SHA-256 is the one rendered here: the parameter is not the
# launch template. One file per certificate: update-ca-certificates links a file by its first.
install_cas() {
  local dir=/usr/local/share/ca-certificates id='' sum
  local -a up=(update-ca-certificates)
  [[ -n $CA ]] || return 0
  [[ ! -r $STATE/cas ]] || read -r id <"$STATE/cas" || true
  [[ $id != "$ID" ]] || return 0
  aws_try "reading $CA" ssm get-parameter --name "$CA" --query Parameter.Value --output text || fail "cannot read $CA"
  read -r sum _ < <(printf %s "$OUT" | sha256sum)
  [[ $sum == "$CA_SUM" ]] || fail "$CA has SHA-256 $sum, not this launch template's"
  ! command -v update-ca-trust >/dev/null || { dir=/etc/pki/ca-trust/source/anchors && up=(update-ca-trust extract); }
  { mkdir -p "$dir" && rm -f "$dir"/cdk-warm-runners-*.crt && awk -v f="$dir/cdk-warm-runners-" '/-BEGIN/{n++} n{print >(f n ".crt")}' <<<"$OUT" && "${up[@]}" >&2; } ||
    fail "cannot install $CA into $dir"
  echo "$ID" >"$STATE/cas"
  log "installed $CA"
}

prime_mode() {
  MODE=$MODE_PRIME TRACE=''
  log "$L_MODE=$MODE instance=$ID"
  install_hook
  install_cas
  # Off the job's path: a warm job finds the runner (and Docker) installed. Before the prepare
  # commands, which may use them (docker pull). A daemon that does not answer fails the PRIME.
  install_runner
  install_docker
  prepare
  check_runner
  pre_read
  log "primed; powering off"
  ship_logs
  # Set first: systemd's SIGTERM may arrive before shutdown returns; that is no failed PRIME.
  ENDING=1
  shutdown -h now || { ENDING=0 && fail "shutdown failed"; }
}

# Before a mode: is this a warm standby? An activated instance is one only with the tag (a
# cold launch carries the activation time too), asked only now, off the warm path. When IMDS
# cannot say, it counts as one: nothing is terminated, as without tags.
# shellcheck disable=SC2317 # called by on_exit
standby_or_unknown() {
  ((!WARM)) || return 0
  [[ -n $ACTIVATED ]] || return 1
  standby_tag || { log "IMDS did not answer for tag $TAG_WARM: cannot tell a warm standby" && return 0; }
  ((WARM))
}

# The pool counts a cold launch that failed before its runner started by this tag, into the
# pool's prime streak (the back-off). Best effort: a tag that cannot be written leaves this one
# failure uncounted, and the instance terminates all the same.
# shellcheck disable=SC2317 # called by on_exit
tag_failure() {
  # Tags are readable by anyone who can describe instances: a URL in the reason loses its
  # userinfo and its query (a mirror's credentials, a presigned signature). The CLI's shorthand
  # splits on "," and quotes: the reason keeps tag-safe characters only.
  local reason=$1
  while [[ $reason =~ ^(.*://)[^/[:space:]]*@(.*)$ ]]; do reason=${BASH_REMATCH[1]}${BASH_REMATCH[2]}; done
  while [[ $reason =~ ^(.*://[^?[:space:]]*)\?[^[:space:]]*(.*)$ ]]; do reason=${BASH_REMATCH[1]}${BASH_REMATCH[2]}; done
  reason=${reason//[^A-Za-z0-9 _.:\/=+@-]/}
  reason=${reason:0:200}
  if aws_try "tagging $ID $TAG_FAILED" ec2 create-tags --resources "$ID" --tags "Key=$TAG_FAILED,Value=$reason" >/dev/null; then
    log "tagged $TAG_FAILED"
  else
    log "warning: $TAG_FAILED not tagged (${ERR:0:300})"
  fi
}

# A failed cold instance terminates itself; a warm standby that fails before choosing a mode
# or while priming is left for the pool to evict; without tags nothing is known, so nothing
# is terminated.
# shellcheck disable=SC2317 # called by the EXIT trap
on_exit() {
  local status=$?
  ((status && !ENDING)) || return 0
  # A config that was read but not used (unparseable, no runner): the secret must not linger.
  ((!HELD)) || (delete_config) || true
  if [[ $MODE == "$MODE_PRIME" ]]; then
    log "PRIME failed (status $status): not powering off"
  elif ((!TAGS_READ)); then
    log "failed (status $status) before the tags were read: not terminating"
  elif [[ -z $MODE ]] && standby_or_unknown; then
    log "warm standby failed (status $status) before a mode: left for the pool to evict"
  else
    log "failed (status $status) in ${MODE:-a cold start}: terminating"
    # No start failure after the runner started, nor when stopped by a signal (TERM 143, INT 130).
    ((RAN || status > 128)) || tag_failure "${MODE:-boot} failed: ${FAILED:-status $status}"
    terminate || true
    return 0
  fi
  ship_logs
}

main() {
  local rc=0
  ((BASH_VERSINFO[0] >= 5)) || fail "needs bash 5, this is $BASH_VERSION"
  for c in curl flock timeout; do command -v "$c" >/dev/null || fail "$c not found"; done
  mkdir -p "$STATE" "${LOG_FILE%/*}"
  # Where this boot's lines begin, for a disk that carries another instance's log.
  [[ ! -f $LOG_FILE ]] || LOG_START=$(wc -c <"$LOG_FILE")
  # One start logic per boot: the user data and the hook can both run on a first boot (an
  # image baked from a primed instance). The lock lasts until the runner exits.
  exec 9>>"$STATE/lock"
  if ! flock -n 9; then
    log "$STATE/lock is held: another start logic runs"
    exit 0
  fi
  # Under the lock: the user data and the hook never install it twice at once.
  ensure_aws_cli "$AWS" || fail "$AWS not found, and installing the aws CLI failed"
  trap on_exit EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  imds api/token PUT || fail "IMDS at $IMDS issued no token after $IMDS_TRIES attempts"
  TOKEN=$OUT
  read_identity
  # Shipping starts at this boot's first line on an instance's first boot (a disk cloned from
  # another instance carries that one's log); later boots go on from what was sent.
  local sid=''
  [[ ! -r $STATE/log-sent ]] || read -r sid _ <"$STATE/log-sent" || true
  [[ $sid == "$ID" ]] || printf '%s %s\n' "$ID" "$LOG_START" >"$STATE/log-sent"
  # The age limit of reuse counts from this instance's first boot.
  local first=''
  [[ ! -r $STATE/first-boot ]] || read -r sid first <"$STATE/first-boot" || true
  [[ $sid == "$ID" && $first =~ ^[0-9]+$ ]] || { first=$EPOCHSECONDS && printf '%s %s\n' "$ID" "$first" >"$STATE/first-boot"; }
  FIRST=$first
  # The marker counts for this instance only: an image baked after a RUN carries another's.
  local began='' bact=''
  if [[ -e $STATE/run-began ]]; then
    read -r began bact <"$STATE/run-began" || true
    if [[ $began != "$ID" ]]; then
      log "ignoring the run-began marker of ${began:-another instance}"
      rm -f "$STATE/run-began"
      began=''
    fi
  fi
  PARAM=$CONFIG_ROOT$ID
  read_tags
  if [[ -n $began ]]; then
    # Of this activation (or any, without reuse): a reboot mid-job. Of another on a reusable
    # instance: a job that never parked; the config it brings is refused (resume_check).
    if [[ $bact == "$ACTIVATED" ]] || ((!REUSE)); then
      log "a RUN began on an earlier boot: not starting again"
      [[ ! -e $UNIT_DIR/$UNIT ]] || systemctl disable --no-reload "$UNIT" &>/dev/null || true
      # Why this instance sits idle (a reboot mid-job, or a self-termination that failed).
      ship_logs
      return 0
    fi
    STALE=${bact:-unknown}
  fi
  # A warm standby's first boot primes without touching SSM (the pool launched it: no config
  # can exist). On a later boot it was started by scale-up (activated: the tags say so, or
  # its activation tags are not visible yet, and the config decides) or rolled back.
  if ((WARM)) && [[ -z $ACTIVATED && ${BASH_SOURCE[0]} != "$HOOK" ]]; then
    prime_mode
    return
  fi
  get_config || rc=$?
  if ((rc == 1 && WARM)) && [[ -z $ACTIVATED ]]; then
    prime_mode
    return
  fi
  case $rc in
    0) run_mode ;;
    1) wait_mode ;;
    *) fail "cannot read $PARAM; not taking that for no config" ;;
  esac
}

main "$@"
exit
# <<< cdk-warm-runners start logic: end <<<
