#!/bin/bash
# The install step: puts the pool's runner on an image that lacks it (a stock Amazon Linux
# 2023), for the instance's architecture, from the pinned release of the contract
# (lambdas/shared/contract/runner-packages.ts) or the pool's `runnerPackage`.
#
# One source, rendered twice by lib/user-data.ts:
# - into the start logic (templates/start-runner.sh, between its markers): the lines above the
#   standalone marker, which the start logic calls in PRIME (off the job's path) and before
#   RUN or WAIT on a cold launch; its log and fail are the start logic's;
# - as a standalone script (renderInstallScript), whole, for an image pipeline to run once.
# Comment lines are dropped when rendered, as in the start logic.
#
# Nothing half-installed is ever used: every file is fetched, checked and unpacked under a
# temporary name beside its place and moved there (one rename) only when complete and checked;
# a temporary left by a crashed earlier boot is removed first. Any failure logs why, removes
# the temporary files and fails: a PRIME then does not park (the pool's prime back-off
# applies), a cold boot terminates.
#
# A pool that follows the newest release also needs the start logic's aws_try, ID and MODE.
# Needs uname, curl, sha256sum, getent, useradd, chown, timeout, sync, dnf or apt-get (with
# apt-cache), for GitHub tar and gzip, and for a pool with Docker usermod and systemctl.
readonly I_GITHUB=@@PROVIDER_GITHUB@@ I_PROVIDER=@@PROVIDER@@ I_USER=@@RUNNER_USER@@ I_DIR=@@RUNNER_DIR@@ \
  I_BIN=@@GITLAB_RUNNER_BIN@@ I_VERSION=@@PACKAGE_VERSION@@ \
  I_URL_X64=@@PACKAGE_URL_X64@@ I_SHA_X64=@@PACKAGE_SHA256_X64@@ I_URL_ARM64=@@PACKAGE_URL_ARM64@@ I_SHA_ARM64=@@PACKAGE_SHA256_ARM64@@ \
  I_FETCH_SECONDS=@@DOWNLOAD_SECONDS@@ I_FETCH_RETRIES=@@DOWNLOAD_RETRIES@@ I_PKG_SECONDS=@@PACKAGE_INSTALL_SECONDS@@ \
  I_DOCKER=@@DOCKER@@ I_DOCKER_SECONDS=@@DOCKER_READY_SECONDS@@ I_SNAP_BIN=@@SNAP_BIN@@ \
  I_RELEASE=@@RELEASE_PARAMETER@@ I_TAG_VERSION=@@TAG_RUNNER_VERSION@@
# The runner's OS packages per package manager (the contract's RUNNER_OS_PACKAGES).
I_PACKAGES_DNF=(@@OS_PACKAGES_DNF@@)
I_PACKAGES_APT=(@@OS_PACKAGES_APT@@)
I_APT_UPDATED=0 I_DOCKER_READY=0

# The unprivileged user the runner runs as, created when the image lacks it.
ensure_runner_user() {
  getent passwd "$I_USER" >/dev/null && return 0
  log "creating user $I_USER"
  useradd --create-home --user-group --shell /bin/bash "$I_USER" || fail "useradd $I_USER failed"
  getent passwd "$I_USER" >/dev/null || fail "no user $I_USER after useradd"
}

# refuse TEMP WHY: removes the temporary files, then fails.
refuse() {
  rm -rf "$1"
  fail "$2: refused, nothing installed"
}

# fetch URL FILE SHA256: 0 when FILE holds URL's whole content and its digest is SHA256.
# curl's own bounds, not the IMDS ones: a proxy the environment names applies (a mirror may
# sit behind one), transient errors (timeouts, 408, 429, 5xx) are retried, a 404 is not; a
# transfer cut short fails (its Content-Length says so) and would fail the digest anyway.
fetch() {
  local got='' err
  # --retry-max-time: the retries share the one bound, so a slow mirror cannot stretch the
  # install past the pool's priming timeout.
  err=$(curl --fail --silent --show-error --location --proto =https,http --proto-redir =https \
    --connect-timeout 10 --max-time "$I_FETCH_SECONDS" --retry "$I_FETCH_RETRIES" --retry-delay 2 \
    --retry-max-time "$I_FETCH_SECONDS" \
    --output "$2" "$1" 2>&1) || { log "download of $1 failed: ${err:0:300}" && return 1; }
  read -r got _ < <(sha256sum "$2") || true
  [[ $got == "$3" ]] || { log "SHA-256 of $1 is ${got:-unknown}, the pin says $3" && return 1; }
}

# install_packages PKG...: installs distribution packages with dnf where the image has it
# (Amazon Linux), else apt-get (Ubuntu, Debian). A word "a|b" is the first of a, b that apt's
# repositories know (names change between releases; dnf takes a). Each call is bounded by
# I_PKG_SECONDS; apt-get's package lists are fetched once per boot (a cloud image ships
# without them), and its dpkg lock is waited for within the bound (unattended-upgrades holds
# it early in a boot).
install_packages() {
  local m=apt-get w c pick=() opts=(-o DPkg::Lock::Timeout="$I_PKG_SECONDS")
  command -v dnf >/dev/null && m=dnf
  [[ $m == dnf ]] || command -v apt-get >/dev/null || { log "neither dnf nor apt-get: cannot install $*"; return 1; }
  if [[ $m == apt-get ]]; then
    export DEBIAN_FRONTEND=noninteractive
    # Retried within the bound: the lock option does not cover the lists' lock, which
    # apt-daily's update may hold (and a mirror may fail for a moment).
    local end=$((SECONDS + I_PKG_SECONDS)) t
    while ((!I_APT_UPDATED)); do
      t=$((end - SECONDS))
      ((t > 0)) || { log "apt-get update failed for ${I_PKG_SECONDS}s"; return 1; }
      log "apt-get update"
      if timeout -k 10 "$t" apt-get "${opts[@]}" -q update >&2; then I_APT_UPDATED=1; else sleep 3; fi
    done
  fi
  for w in "$@"; do
    for c in ${w//|/ }; do
      # apt-cache show fails on a name no repository has (and on a purely virtual one).
      if [[ $w == "$c" || $m == dnf ]] || apt-cache show --no-all-versions "$c" >/dev/null 2>&1; then
        pick+=("$c")
        continue 2
      fi
    done
    log "no package of $w is known to $m"
    return 1
  done
  log "$m install -y ${pick[*]}"
  if [[ $m == dnf ]]; then
    timeout -k 10 "$I_PKG_SECONDS" dnf install -y "${pick[@]}" >&2
  else
    timeout -k 10 "$I_PKG_SECONDS" apt-get "${opts[@]}" -q install -y --no-install-recommends --no-upgrade "${pick[@]}" >&2
  fi
}

# ensure_aws_cli CMD: the aws CLI, which the start logic needs before anything else (Canonical's
# Ubuntu AMIs lack it): where CMD is not found, installs it once, from the snap store where
# snapd runs (Ubuntu; 24.04 has no awscli package), else the distribution's awscli package
# (Debian), within the package bound. A warm activation finds it on the parked disk.
ensure_aws_cli() {
  [[ ! -d $I_SNAP_BIN || :$PATH: == *:$I_SNAP_BIN:* ]] || PATH=$PATH:$I_SNAP_BIN
  command -v "$1" >/dev/null && return 0
  log "$1 not found: installing the aws CLI"
  if command -v snap >/dev/null; then
    timeout -k 10 "$I_PKG_SECONDS" snap install aws-cli --classic >&2 || return 1
    # Not refreshed on a warm activation's path (snapd refreshes an overdue snap at boot).
    timeout -k 5 30 snap refresh --hold aws-cli >&2 || log "snap refresh --hold aws-cli failed"
    [[ :$PATH: == *:$I_SNAP_BIN:* ]] || PATH=$PATH:$I_SNAP_BIN
  else
    install_packages awscli || return 1
  fi
  command -v "$1" >/dev/null
}

# The OS packages the runner needs, for this image's package manager.
os_packages() {
  if command -v dnf >/dev/null; then set -- "${I_PACKAGES_DNF[@]}"; else set -- "${I_PACKAGES_APT[@]}"; fi
  (($#)) || return 0
  install_packages "$@"
}

# Docker for a pool's container jobs (its `docker` prop), once per boot: installed from the
# distribution where missing (an image that has it keeps it), the daemon enabled and started,
# the runner user in the docker group, and the daemon asked until it answers, within
# I_DOCKER_SECONDS. The start logic calls it while priming and on a cold launch, never on a
# warm job's path: a parked instance has all of it, and systemd starts the daemon at boot.
install_docker() {
  local pkg=docker.io end
  ((I_DOCKER && !I_DOCKER_READY)) || return 0
  # Installed: the command and the group usermod needs (the package brings both).
  if ! command -v docker >/dev/null || ! getent group docker >/dev/null; then
    ! command -v dnf >/dev/null || pkg=docker
    log "installing Docker ($pkg)"
    install_packages "$pkg" || fail "installing Docker ($pkg) failed"
    { command -v docker && getent group docker; } >/dev/null || fail "no docker command or group after installing $pkg"
  fi
  usermod -aG docker "$I_USER" || fail "cannot add $I_USER to the docker group"
  systemctl enable --now docker >&2 || fail "systemctl enable --now docker failed"
  end=$((SECONDS + I_DOCKER_SECONDS))
  until timeout -k 2 10 docker info >/dev/null 2>&1; do
    ((SECONDS < end)) || fail "the Docker daemon did not answer within ${I_DOCKER_SECONDS}s"
    sleep 1
  done
  I_DOCKER_READY=1
  log "Docker is ready"
}

# GitHub: the tarball, unpacked beside RUNNER_DIR, checked, then moved into place.
install_github() {
  local part=$I_DIR.partial
  rm -rf "$part"
  # Only an empty directory is replaced: anything else there is not ours to overwrite.
  [[ ! -e $I_DIR ]] || rmdir "$I_DIR" 2>/dev/null ||
    fail "$I_DIR exists without run.sh: not installing over it (empty it, or bake the runner into the image)"
  mkdir -p "$part/tree"
  fetch "$1" "$part/runner.tar.gz" "$2" || refuse "$part" "the runner package"
  tar -xzf "$part/runner.tar.gz" -C "$part/tree" --no-same-owner || refuse "$part" "cannot unpack $1"
  [[ -f $part/tree/config.sh && -x $part/tree/config.sh && -f $part/tree/run.sh && -x $part/tree/run.sh ]] ||
    refuse "$part" "$1 holds no executable config.sh and run.sh"
  os_packages || refuse "$part" "the runner's OS packages"
  chown -R "$I_USER:" "$part/tree" || refuse "$part" "chown to $I_USER failed"
  # On disk before the rename: a crash after it must not leave a run.sh of zero bytes in place.
  sync
  mv -T "$part/tree" "$I_DIR" || refuse "$part" "cannot move the runner into $I_DIR"
  rm -rf "$part"
}

# GitLab: the binary, checked (it must answer --version) under a temporary name, then moved.
install_gitlab() {
  local part=$I_BIN.partial
  rm -f "$part"
  mkdir -p "${I_BIN%/*}"
  fetch "$1" "$part" "$2" || refuse "$part" "the gitlab-runner binary"
  chmod 0755 "$part"
  os_packages || refuse "$part" "the runner's OS packages"
  # Asked before the move (the same file after it): a binary that cannot run is never in place.
  timeout -k 5 30 "$part" --version >/dev/null 2>&1 || refuse "$part" "the downloaded gitlab-runner does not answer --version"
  sync
  mv -f "$part" "$I_BIN" || refuse "$part" "cannot move gitlab-runner to $I_BIN"
}

# https, or plain http to the loopback only (a test server), as the contract's runnerPackageProblems.
release_url_ok() {
  local loopback='^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?/'
  [[ $1 == https://?* || $1 =~ $loopback ]]
}

# A pool that follows the newest release (I_RELEASE, the start logic only): the release the
# control plane resolved and checked (contract runner-release.ts: one line of version, then URL
# and SHA-256 per architecture, then the publication date) replaces the rendered pin in V_*.
# Not resolved yet (a fresh fleet): the rendered pin. Unreadable or malformed: fail, as a
# failed download does (a PRIME does not park, a cold boot ends), never an unchecked fetch.
resolved_release() {
  local rc=0 v u64 s64 ua sa at
  [[ -n $I_RELEASE ]] || return 0
  aws_try "reading $I_RELEASE" ssm get-parameter --name "$I_RELEASE" --query Parameter.Value --output text || rc=$?
  if ((rc == 1)); then
    log "no resolved runner release at $I_RELEASE yet: installing the pinned $V_VERSION"
    return 0
  fi
  ((rc == 0)) || fail "cannot read the resolved runner release $I_RELEASE: refused, nothing installed"
  read -r v u64 s64 ua sa at _ <<<"$OUT" || true
  if ! [[ $v =~ ^[0-9A-Za-z][0-9A-Za-z._+-]{0,39}$ && $s64 =~ ^[0-9a-f]{64}$ && $sa =~ ^[0-9a-f]{64}$ && -n $at ]] || ! release_url_ok "$u64" || ! release_url_ok "$ua"; then
    fail "the resolved runner release at $I_RELEASE does not parse: refused, nothing installed"
  fi
  V_VERSION=$v V_URL_X64=$u64 V_SHA_X64=$s64 V_URL_ARM64=$ua V_SHA_ARM64=$sa
}

# The version this instance carries, on itself (the pool replaces parked instances of a version
# that is not the resolved one). A PRIME that cannot write it does not park: it would carry an
# unknown version forever; a cold boot goes on (its job is waiting). The standalone script (an
# image pipeline) has no instance id: nothing to tag.
tag_version() {
  [[ -n $I_TAG_VERSION && -n ${ID-} ]] || return 0
  aws_try "tagging $ID $I_TAG_VERSION" ec2 create-tags --resources "$ID" --tags "Key=$I_TAG_VERSION,Value=$V_VERSION" >/dev/null && return 0
  [[ $MODE != "$MODE_PRIME" ]] || fail "cannot tag $ID with its runner version $V_VERSION"
  log "warning: cannot tag $ID with its runner version $V_VERSION"
}

# Installs what is missing: the user, then the runner for this architecture. An image that has
# the runner (GitHub run.sh, the gitlab-runner binary) keeps it: nothing is fetched.
install_runner() {
  local arch url sha
  ensure_runner_user
  if [[ $I_PROVIDER == "$I_GITHUB" ]]; then [[ ! -x $I_DIR/run.sh ]] || return 0; else [[ ! -x $I_BIN ]] || return 0; fi
  V_VERSION=$I_VERSION V_URL_X64=$I_URL_X64 V_SHA_X64=$I_SHA_X64 V_URL_ARM64=$I_URL_ARM64 V_SHA_ARM64=$I_SHA_ARM64
  resolved_release
  arch=$(uname -m) || arch=''
  case $arch in
    x86_64) url=$V_URL_X64 sha=$V_SHA_X64 ;;
    aarch64) url=$V_URL_ARM64 sha=$V_SHA_ARM64 ;;
    *) fail "no $I_PROVIDER runner for architecture '${arch//[^A-Za-z0-9_.-]/?}' (only x86_64 and aarch64): refused, nothing installed" ;;
  esac
  log "installing the $I_PROVIDER runner $V_VERSION for $arch from $url"
  if [[ $I_PROVIDER == "$I_GITHUB" ]]; then install_github "$url" "$sha"; else install_gitlab "$url" "$sha"; fi
  log "installed the $I_PROVIDER runner $V_VERSION"
  tag_version
}
# >>> install-runner: standalone only >>>
# The standalone rendering: an image pipeline's step (the start logic has its own log and fail).
set -euo pipefail
umask 022
log() { printf '%(%Y-%m-%dT%H:%M:%S)TZ install-runner: %s\n' -1 "$*" >&2; }
fail() {
  log "error: $*"
  exit 1
}
install_runner
install_docker
