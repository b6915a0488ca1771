# shellcheck shell=bash
# The boot-script sandbox for bats: a loopback IMDSv2 server, an AWS proxy in front of moto
# and a control API (test/support/boot-sandbox.ts), the rendered script under $ROOT, and
# shims for what cannot run here (systemctl, shutdown, the runner binaries, BSD date).
#
# setup_file: sandbox_start   setup: sandbox_reset   teardown_file: sandbox_stop

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)

# The real aws CLI; behind pyenv its shim needs pyenv, so resolve the real executable.
resolve_aws_cli() {
  local path
  path=$(command -v aws) || { echo 'the aws CLI is missing (pip install awscli)' >&2; return 1; }
  if [[ $path == */shims/aws ]] && command -v pyenv >/dev/null; then path=$(pyenv which aws); fi
  printf '%s' "$path"
}

sandbox_start() {
  # The machine's slowdown, measured for this test (or forced, and then checked, by
  # CWR_SLOWDOWN): the rendered bounds and this harness's safety bounds scale with it
  # (test/support/slowdown.ts).
  CWR_SLOWDOWN=$(node --import tsx "$REPO/test/support/slowdown.ts") || return 1
  export CWR_SLOWDOWN
  ROOT=$(mktemp -d /tmp/cwr-boot.XXXXXX)
  # The runner runs as an unprivileged user, which must reach its shim and the calls dir.
  chmod 755 "$ROOT"
  export ROOT
  node --import tsx "$REPO/test/support/boot-sandbox.ts" >"$ROOT/sandbox.json" 2>"$ROOT/sandbox.err" &
  export SANDBOX_PID=$!
  local line='' bound end
  bound=$(scaled_seconds 60)
  end=$((SECONDS + bound))
  while ((SECONDS < end)); do
    line=$(head -n 1 "$ROOT/sandbox.json" 2>/dev/null || true)
    [[ -z $line ]] || break
    kill -0 "$SANDBOX_PID" 2>/dev/null || { cat "$ROOT/sandbox.err" >&2; return 1; }
    sleep 0.1
  done
  [[ -n $line ]] || { echo "the sandbox did not start within $bound s" >&2; cat "$ROOT/sandbox.err" >&2; return 1; }
  [[ $line =~ \"imds\":\"([^\"]+)\" ]] && export IMDS_URL=${BASH_REMATCH[1]}
  [[ $line =~ \"aws\":\"([^\"]+)\" ]] && export AWS_URL=${BASH_REMATCH[1]}
  [[ $line =~ \"control\":\"([^\"]+)\" ]] && export CONTROL_URL=${BASH_REMATCH[1]}
  [[ $line =~ \"moto\":\"([^\"]+)\" ]] && export MOTO_URL=${BASH_REMATCH[1]}
  AWS_CLI_BIN=$(resolve_aws_cli)
  export AWS_CLI_BIN
  export RUNNER_USER=nobody
  ((EUID == 0)) || RUNNER_USER=$(id -un)
  # A suite of stock images (stock_user): its user is the runner user of every rendering.
  if [[ -n ${STOCK_USER-} ]]; then
    RUNNER_USER=$STOCK_USER REUSE_USER=$STOCK_USER
    export REUSE_USER
  fi
  build_release "$ROOT/release"
  release_start || return 1
  node --import tsx "$REPO/test/templates/render-sandbox.ts" --root "$ROOT" --imds "$IMDS_URL" \
    --aws "$AWS_URL" --aws-cli "$AWS_CLI_BIN" --runner-user "$RUNNER_USER" --release "$RELEASE_URL" \
    --release-dir "$ROOT/release" ${REUSE_USER:+--reuse-user "$REUSE_USER"}
  local shims=$REPO/test/templates/shims
  mkdir -p "$ROOT/bin" "$ROOT/bsd" "$ROOT/runner/github" "$ROOT/runner/gitlab"
  cp "$shims/bin/"* "$ROOT/bin/"
  cp "$shims/bsd/date" "$ROOT/bsd/date"
  cp "$shims/runner/runner" "$ROOT/runner-shim"
  chmod -R a+rX "$ROOT/bin" "$ROOT/bsd" "$ROOT/runner" "$ROOT/runner-shim"
  # The fleet's boot log group, as the CDK app creates it; the instances create their streams.
  # shellcheck source=/dev/null
  source "$ROOT/contract.env"
  moto_aws logs create-log-group --log-group-name "$LOG_GROUP"
}

# scaled_seconds BASE: BASE seconds (a bound tuned on an unloaded machine) times the
# slowdown, rounded up. For safety bounds that only catch hangs.
scaled_seconds() { awk -v b="$1" -v f="${CWR_SLOWDOWN:-1}" 'BEGIN { s = b * f; printf "%d", (s == int(s)) ? s : int(s) + 1 }'; }

# moto_aws ARGS...: the aws CLI straight at moto (not through the counting proxy), as the
# test itself, never as the instance.
moto_aws() {
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
    "$AWS_CLI_BIN" --endpoint-url "$MOTO_URL" --region us-east-1 "$@"
}

# log_messages [STREAM]: the messages in the instance's stream of the boot log group, in order.
log_messages() {
  moto_aws logs get-log-events --log-group-name "$LOG_GROUP" --log-stream-name "${1:-$INSTANCE_ID}" \
    --start-from-head --query 'events[].message' --output json | sed -n 's/^ *"\(.*\)",\{0,1\}$/\1/p'
}

# build_release DIR: the runner packages the loopback release server serves, small but real:
# per architecture a GitHub tarball (config.sh, run.sh as the runner shim) and a GitLab binary
# (the runner shim, which answers --version), each file unlike the other architecture's.
build_release() {
  local dir=$1 tree arch shim=$REPO/test/templates/shims/runner/runner
  mkdir -p "$dir"
  for arch in x64 arm64; do
    tree=$(mktemp -d "$dir/tree.XXXXXX")
    chmod 755 "$tree"
    install -m 755 "$shim" "$tree/run.sh"
    printf '#!/bin/bash\necho "config.sh $*"\n' >"$tree/config.sh"
    chmod 755 "$tree/config.sh"
    echo "$arch" >"$tree/ARCH"
    tar -czf "$dir/github-$arch.tar.gz" -C "$tree" .
    rm -rf "$tree"
    { cat "$shim" && printf '# %s\n' "$arch"; } >"$dir/gitlab-$arch"
  done
}

# release_start: the loopback release server (local/release/server.ts) on $ROOT/release.
release_start() {
  node --import tsx "$REPO/local/release/server.ts" "$ROOT/release" >"$ROOT/release.json" 2>"$ROOT/release.err" &
  export RELEASE_PID=$!
  local line='' bound end
  bound=$(scaled_seconds 30)
  end=$((SECONDS + bound))
  while ((SECONDS < end)) && [[ -z $line ]]; do
    line=$(head -n 1 "$ROOT/release.json" 2>/dev/null || true)
    [[ -n $line ]] || sleep 0.1
  done
  [[ $line =~ \"url\":\"([^\"]+)\" ]] || { echo "the release server did not start within $bound s" >&2; cat "$ROOT/release.err" >&2; return 1; }
  export RELEASE_URL=${BASH_REMATCH[1]}
}

# release_mode MODE: how the release server answers from now on ("" | 404 | tamper | truncate).
release_mode() { printf '%s\n' "$1" >"$ROOT/release/.mode"; }
# release_requests: the paths the release server was asked for since the last sandbox_reset.
release_requests() { cat "$ROOT/release/.requests" 2>/dev/null || true; }

# needs_root WHY: for setup_file: a suite that needs root skips without it, and fails instead
# when CI is set (CI runs as root), so it never passes unseen there.
needs_root() {
  ((EUID != 0)) || return 0
  if [[ -n ${CI-} ]]; then
    echo "CI is set but this is not root (CI runs as root): $1" >&2
    return 1
  fi
  skip "$1"
}

# stock_machine: a stock image: no runner installed for either provider, no runner user.
# With STOCK_USER (stock_user) the user is really absent and the install step's useradd (the
# shim, then the real one) really creates it, its home at $REUSE_HOME; without, the getent
# shim only hides the sandbox's runner user until useradd was called.
stock_machine() {
  rm -rf "${ROOT:?}/runner/github" "${ROOT:?}/runner/gitlab/gitlab-runner"
  if [[ -n ${STOCK_USER-} ]]; then
    remove_stock_user
    mkdir -p "$ROOT/home"
    printf '%s\n' "$REUSE_HOME" >"$ROOT/calls/useradd-home"
  else
    printf '%s\n' "$RUNNER_USER" >"$ROOT/calls/stock-user"
  fi
}

# apt_machine KNOWN...: an Ubuntu-style image: no dnf, so the install step uses apt-get (the
# shim: never this host's), whose repositories know the packages KNOWN (apt-cache shim).
apt_machine() {
  rm -f "$ROOT/bin/dnf"
  printf '%s\n' "$@" >"$ROOT/calls/apt-known"
}

# stock_user: for setup_file, before sandbox_start (root only): the runner user of a suite of
# stock images, a name of this run's own (cleaning kills every process of the runner user, and
# other runs may share this machine). No user of that name exists until a boot creates it.
stock_user() {
  export STOCK_USER=cwr-stock-$$
  remove_stock_user
}

# remove_stock_user: STOCK_USER, its group, its processes and its home gone from this machine.
remove_stock_user() {
  if id -u "$STOCK_USER" &>/dev/null; then
    pkill -KILL -U "$STOCK_USER" || true
    userdel -f "$STOCK_USER" 2>/dev/null || true
  fi
  ! getent group "$STOCK_USER" >/dev/null || groupdel "$STOCK_USER"
  [[ -z ${REUSE_HOME-} ]] || rm -rf "$REUSE_HOME"
  refute id -u "$STOCK_USER" &>/dev/null
}

sandbox_stop() {
  [[ -z ${STOCK_USER-} ]] || remove_stock_user
  [[ -z ${RELEASE_PID-} ]] || { kill -TERM "$RELEASE_PID" 2>/dev/null || true; }
  if [[ -n ${SANDBOX_PID-} ]]; then
    kill -TERM "$SANDBOX_PID" 2>/dev/null || true
    wait "$SANDBOX_PID" 2>/dev/null || true
  fi
  [[ -z ${ROOT-} || $ROOT != /tmp/cwr-boot.* ]] || rm -rf "$ROOT"
}

# A fresh machine for every test: no hook, no state, no calls, both runners installed (stock_machine
# takes them away), the release server answering normally.
sandbox_reset() {
  install -m 755 "$REPO/test/templates/shims/bin/dnf" "$ROOT/bin/dnf"
  install -m 755 "$REPO/test/templates/shims/bin/snap" "$ROOT/bin/snap"
  rm -rf "${ROOT:?}"/{etc,usr,var,calls,dev,sys,tmp,aws,snap,fail-prepare,out} "${ROOT:?}/runner/"* "${ROOT:?}/release/".{mode,requests}
  mkdir -p "$ROOT"/{etc/systemd/system,dev,sys,tmp,aws} "$ROOT/calls" "$ROOT/runner/github" "$ROOT/runner/gitlab"
  chmod 1777 "$ROOT/calls"
  install -m 755 "$ROOT/runner-shim" "$ROOT/runner/github/run.sh"
  install -m 755 "$ROOT/runner-shim" "$ROOT/runner/gitlab/gitlab-runner"
  echo 0123456789abcdef0123456789abcdef >"$ROOT/etc/machine-id"
  head -c 65536 /dev/zero >"$ROOT/dev/root-volume"
  : >"$ROOT/sys/board_asset_tag"
  # shellcheck source=/dev/null
  source "$ROOT/contract.env"
  ctl POST /log/reset >/dev/null
}

# ctl METHOD PATH [JSON]: the sandbox's control API.
ctl() {
  curl -sf -X "$1" -H 'content-type: application/json' ${3:+--data "$3"} "$CONTROL_URL$2"
}

# new_instance [TAGS_JSON] [EXTRA_JSON]: a running instance in moto that IMDS now plays; on
# Nitro its id is in DMI, which the sandbox mirrors.
new_instance() {
  local out tags=${1:-'{}'}
  out=$(ctl POST /instance "{\"tags\":$tags${2:+,$2}}")
  [[ $out =~ \"instanceId\":\"(i-[0-9a-f]+)\" ]]
  INSTANCE_ID=${BASH_REMATCH[1]}
  printf '%s\n' "$INSTANCE_ID" >"$ROOT/sys/board_asset_tag"
}

warm_tags() { printf '{"%s":"pool-a","%s":"%s"%s}' "$TAG_POOL" "$TAG_WARM" "$WARM_VALUE" "${1:+,$1}"; }
cold_tags() { printf '{"%s":"pool-a"%s}' "$TAG_POOL" "${1:+,$1}"; }
# standby_tags VALUE: the warm-standby key with another value than the contract's.
standby_tags() { printf '{"%s":"pool-a","%s":"%s"}' "$TAG_POOL" "$TAG_WARM" "$1"; }
# ISO 8601 UTC with milliseconds and Z, like toISOString, SECONDS_AGO in the past.
iso_ago() { date -u -d "@$(($(date +%s) - $1))" +%Y-%m-%dT%H:%M:%S.250Z; }

# launch_tags PATH [ARGS...]: the exact tags of a launch path (cold, standby, activated), as the
# Lambdas set them (test/templates/launch-tags.ts), as new_instance takes them.
launch_tags() { node --import tsx "$REPO/test/templates/launch-tags.ts" --prefix "$PREFIX" --path "$@"; }

# The instance's tags as moto holds them, "KEY=VALUE" a line.
moto_tags() {
  moto_aws ec2 describe-tags --filters "Name=resource-id,Values=$INSTANCE_ID" --query 'Tags[].[Key,Value]' --output text | tr '\t' '='
}

# set_tags JSON: the instance's tags as IMDS shows them from now on (as after an activation).
set_tags() { ctl POST /imds "{\"tags\":$1}" >/dev/null; }

github_config() { ctl POST /runner-config "{\"prefix\":\"$PREFIX\",\"config\":{\"provider\":\"github\",\"jitConfig\":\"$1\"}}" >/dev/null; }
gitlab_config() {
  ctl POST /runner-config "{\"prefix\":\"$PREFIX\",\"config\":{\"provider\":\"gitlab\",\"url\":\"$1\",\"token\":\"$2\"}}" >/dev/null
}
param_exists() { [[ $(ctl GET "/param?name=$CONFIG_ROOT$INSTANCE_ID") == *'"exists":true'* ]]; }
instance_state() { ctl GET "/instance?id=$INSTANCE_ID" | sed -E 's/.*"state":"([^"]*)".*/\1/'; }

# boot_env CMD...: the environment cloud-init or systemd would give, with the shims first in
# PATH and no AWS credentials or config (the CLI must get its credentials from IMDS). The
# CLI's retries and timeouts come from the rendered script alone (two attempts per call, the
# read timeout of render-sandbox.ts). BOOT_TIMEOUT (default 90 s times the slowdown) is a
# safety bound, not a measure.
boot_env() {
  env -i PATH="${EXTRA_PATH:+$EXTRA_PATH:}$ROOT/bin:$PATH" HOME="$HOME" ${PYENV_ROOT:+PYENV_ROOT="$PYENV_ROOT"} \
    LANG=C.UTF-8 TMPDIR="$ROOT/tmp" AWS_CONFIG_FILE="$ROOT/aws/config" AWS_SHARED_CREDENTIALS_FILE="$ROOT/aws/credentials" \
    SHIM_CALLS="$ROOT/calls" SHIM_UNIT_DIR="$ROOT/etc/systemd/system" \
    timeout -k 5 "${BOOT_TIMEOUT:-$(scaled_seconds 90)}" "$@"
}

# boot FILE: runs the user data (first boot) or the hook (later boots) as a file, the way
# cloud-init and systemd do; output in $ROOT/out, exit status in $status.
boot() {
  status=0
  boot_env "$1" >"$ROOT/out" 2>&1 || status=$?
}
boot_first() { boot "$ROOT/user-data-${1:-github}.sh"; }
boot_hook() { boot "$ROOT/usr/local/sbin/start-runner"; }

# boot_background FILE: as boot, without waiting; boot_wait collects the status.
boot_background() {
  boot_env "$1" >"$ROOT/out" 2>&1 &
  BOOT_PID=$!
}
boot_wait() {
  status=0
  wait "$BOOT_PID" || status=$?
}
# term_boot: SIGTERM to the start logic itself (its pid is in its log lines), the way systemd
# or a shutdown stops it; BOOT_PID is the shell around the timeout.
term_boot() {
  local pid
  pid=$(grep -oE 'start-runner\[[0-9]+\]' "$ROOT/out" | head -n 1 | tr -dc 0-9)
  [[ -n $pid ]] && kill -TERM "$pid"
}
# wait_for_log TEXT: until the boot's output holds TEXT (a safety bound of 60 s times the
# slowdown).
wait_for_log() {
  local bound end
  bound=$(scaled_seconds 60)
  end=$((SECONDS + bound))
  while ((SECONDS < end)); do
    grep -qF -- "$1" "$ROOT/out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no \"$1\" in the boot output within $bound s" >&2
  return 1
}

called() { [[ -f $ROOT/calls/$1 ]] && grep -qFx -- "$2" "$ROOT/calls/$1"; }
calls_of() { cat "$ROOT/calls/$1" 2>/dev/null || true; }
# aws_actions: the instance's AWS calls but its log shipping (CloudWatch Logs); logs_actions: those.
all_aws_actions() { ctl GET /log | grep -oE '"action":"[^"]+"' | cut -d'"' -f4; }
aws_actions() { all_aws_actions | grep -v '^Logs_' || true; }
logs_actions() { all_aws_actions | grep '^Logs_' || true; }
# aws_times ACTION: the proxy's time (epoch ms) of each call of ACTION, in order.
aws_times() { ctl GET /log | grep -oE "\"t\":[0-9.]+,\"action\":\"$1\"" | cut -d: -f2 | cut -d, -f1; }
imds_paths() { ctl GET /log | grep -oE '"path":"[^"]+"' | cut -d'"' -f4; }

# Shows the boot's output when an assertion fails.
show_boot() {
  echo "--- exit status: ${status-}" >&2
  cat "$ROOT/out" >&2 2>/dev/null || true
}

# refute CMD...: fails when CMD succeeds (bats does not fail a test on a negated "! cmd").
refute() {
  if "$@"; then
    echo "expected to fail: $*" >&2
    return 1
  fi
}

# nowhere_in TEXT PATH...: no file under the PATHs holds TEXT, the runner's recorded arguments
# aside (the runner gets its secret there). grep must answer "no match" (1), not fail (2).
nowhere_in() {
  local rc=0
  grep -rlF --exclude=runner.args -- "$1" "${@:2}" || rc=$?
  if ((rc != 1)); then
    echo "\"$1\" found (or grep failed, status $rc)" >&2
    return 1
  fi
}
