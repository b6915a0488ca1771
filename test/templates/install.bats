#!/usr/bin/env bats
# The install step (templates/install-runner.sh) in the boot sandbox: a "stock" machine (no
# runner, no runner user: helpers.bash stock_machine) installs the pinned runner package from
# the loopback release server (real curl, real sha256sum and tar, small real packages with
# their real digests); shims stand in for useradd, dnf, apt-get, apt-cache and `uname -m`.
# Issue 10, section 1; the apt path (Ubuntu, Debian): issue 24, section 2.

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

# nothing_installed PROVIDER: no runner in place and no temporary left beside its place.
nothing_installed() {
  if [[ $1 == github ]]; then
    [ ! -e "$ROOT/runner/github" ]
    [ ! -e "$ROOT/runner/github.partial" ]
  else
    [ ! -e "$ROOT/runner/gitlab/gitlab-runner" ]
    [ ! -e "$ROOT/runner/gitlab/gitlab-runner.partial" ]
  fi
}

# refused_prime: the PRIME failed and the standby did not park.
refused_prime() {
  [ "$status" -ne 0 ]
  grep -qF "refused, nothing installed" "$ROOT/out"
  grep -qF "PRIME failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "stock image, GitHub: PRIME creates the user, installs the pinned tarball and its OS packages, then parks" {
  stock_machine
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(calls_of useradd)" = "--create-home --user-group --shell /bin/bash $RUNNER_USER" ]
  [ "$(calls_of dnf)" = 'install -y lttng-ust openssl-libs krb5-libs zlib libicu git' ]
  [ "$(release_requests)" = /github-x64.tar.gz ]
  [ -x "$ROOT/runner/github/config.sh" ]
  cmp "$ROOT/runner/github/run.sh" "$REPO/test/templates/shims/runner/runner"
  [ "$(cat "$ROOT/runner/github/ARCH")" = x64 ]
  [ "$(stat -c %U "$ROOT/runner/github/run.sh")" = "$RUNNER_USER" ]
  [ ! -e "$ROOT/runner/github.partial" ]
  grep -qF "installed the github runner sandbox-1" "$ROOT/out"
  # Installed before the prepare commands (which may use it), and parked after them.
  [ "$(calls_of prepare)" = "prepared as $(id -un)" ]
  called shutdown "-h now"
}

@test "stock image, GitLab: PRIME installs the binary, which answers --version before it is moved into place, then parks" {
  stock_machine
  new_instance "$(warm_tags)"
  boot_first gitlab
  [ "$status" -eq 0 ]
  [ "$(calls_of dnf)" = 'install -y git' ]
  [ "$(release_requests)" = /gitlab-x64 ]
  cmp "$ROOT/runner/gitlab/gitlab-runner" "$ROOT/release/gitlab-x64"
  [ -x "$ROOT/runner/gitlab/gitlab-runner" ]
  [ ! -e "$ROOT/runner/gitlab/gitlab-runner.partial" ]
  # --version ran (the shim records nothing then), no runner did.
  [ ! -e "$ROOT/calls/runner" ]
  called shutdown "-h now"
}

@test "an arm64 instance installs the arm64 package" {
  stock_machine
  echo aarch64 >"$ROOT/calls/arch"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(release_requests)" = /github-arm64.tar.gz ]
  [ "$(cat "$ROOT/runner/github/ARCH")" = arm64 ]
  called shutdown "-h now"
}

@test "an image that has the runner and its user installs nothing" {
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(release_requests)" = '' ]
  [ ! -e "$ROOT/calls/useradd" ]
  [ ! -e "$ROOT/calls/dnf" ]
  refute grep -qF "installing the" "$ROOT/out"
  called shutdown "-h now"
}

@test "a tampered GitHub download is refused: nothing installed, no park" {
  stock_machine
  release_mode tamper
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  grep -qF "SHA-256 of $RELEASE_URL/github-x64.tar.gz is " "$ROOT/out"
  nothing_installed github
  # Refused before anything else was installed for it.
  [ ! -e "$ROOT/calls/dnf" ]
}

@test "a tampered GitLab download is refused: nothing installed, no park" {
  stock_machine
  release_mode tamper
  new_instance "$(warm_tags)"
  boot_first gitlab
  refused_prime
  grep -qF "SHA-256 of $RELEASE_URL/gitlab-x64 is " "$ROOT/out"
  nothing_installed gitlab
}

@test "a truncated download is refused: nothing installed, no park" {
  stock_machine
  release_mode truncate
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  grep -qF "download of $RELEASE_URL/github-x64.tar.gz failed" "$ROOT/out"
  nothing_installed github
}

@test "a missing download (404) is refused: nothing installed, no park" {
  stock_machine
  release_mode 404
  new_instance "$(warm_tags)"
  boot_first gitlab
  refused_prime
  grep -qF "download of $RELEASE_URL/gitlab-x64 failed" "$ROOT/out"
  grep -qF "404" "$ROOT/out"
  nothing_installed gitlab
}

@test "an unknown architecture is refused before any download, no park" {
  stock_machine
  echo riscv64 >"$ROOT/calls/arch"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "no github runner for architecture 'riscv64' (only x86_64 and aarch64): refused, nothing installed" "$ROOT/out"
  [ "$(release_requests)" = '' ]
  nothing_installed github
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "a failing dnf install is refused: the unpacked runner is not moved into place" {
  stock_machine
  touch "$ROOT/calls/dnf-fail"
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  grep -qF "dnf install -y lttng-ust openssl-libs krb5-libs zlib libicu git" "$ROOT/out"
  grep -qF "the runner's OS packages: refused, nothing installed" "$ROOT/out"
  nothing_installed github
}

# apt_calls: the apt-get shim's calls without the lock option every call carries.
apt_calls() { calls_of apt-get | sed -E 's/^-o DPkg::Lock::Timeout=[0-9]+ //'; }

@test "stock Ubuntu 24.04-style image (no dnf): apt-get update once, then the runner's packages by their 24.04 names, then parks" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1t64 liblttng-ust1 libssl3t64 libssl3 libicu74 git
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(apt_calls)" = "$(printf '%s\n' '-q update' \
    '-q install -y --no-install-recommends --no-upgrade libkrb5-3 zlib1g liblttng-ust1t64 libssl3t64 libicu74 git')" ]
  # Every call waits for the dpkg lock within the install bound.
  [ "$(calls_of apt-get | grep -c '^-o DPkg::Lock::Timeout=[0-9][0-9]* ')" -eq 2 ]
  [ ! -e "$ROOT/calls/dnf" ]
  [ -x "$ROOT/runner/github/run.sh" ]
  grep -qF "installed the github runner sandbox-1" "$ROOT/out"
  called shutdown "-h now"
}

# no_aws_machine: an image without the aws CLI (Canonical's Ubuntu AMIs): the no-aws rendering
# calls `aws` by name, and its snap directory (hostPaths.snapBinDir) is $ROOT/snap/bin, which
# the snap shim fills with the real CLI.
no_aws_machine() {
  printf '%s\n' "$ROOT/snap/bin/aws" >"$ROOT/calls/aws-target"
  printf '%s\n' "$AWS_CLI_BIN" >"$ROOT/calls/aws-real"
}

# boot_no_aws: the first boot of the no-aws rendering with the system's PATH (this host's aws
# CLI lives elsewhere), so only the snap directory the boot adds can give it `aws`.
boot_no_aws() {
  ! PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v aws >/dev/null
  PATH=/usr/sbin:/usr/bin:/sbin:/bin boot "$ROOT/user-data-github-no-aws.sh"
}

@test "an Ubuntu-style image without the aws CLI installs it from the snap store before anything else, then primes and parks" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1t64 libssl3t64 libicu74 git
  no_aws_machine
  new_instance "$(warm_tags)"
  [ ! -e "$ROOT/snap/bin/aws" ]
  boot_no_aws
  [ "$status" -eq 0 ]
  [ "$(cat "$ROOT/calls/snap")" = "$(printf '%s\n' 'install aws-cli --classic' 'refresh --hold aws-cli')" ]
  grep -qF "aws not found: installing the aws CLI" "$ROOT/out"
  [ -x "$ROOT/runner/github/run.sh" ]
  called shutdown "-h now"
  # The parked disk has it: the hook's boot (a warm activation) installs nothing.
  rm "$ROOT/calls/snap"
  boot_hook
  [ ! -e "$ROOT/calls/snap" ]
}

@test "an image without the aws CLI whose install fails stops before any mode: no package installed, no park" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1t64 libssl3t64 libicu74 git
  no_aws_machine
  touch "$ROOT/calls/snap-fail"
  new_instance "$(warm_tags)"
  boot_no_aws
  [ "$status" -ne 0 ]
  grep -qF "aws not found, and installing the aws CLI failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/apt-get" ]
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "an image without the aws CLI and without snapd (Debian) installs the distribution's awscli with apt-get" {
  stock_machine
  apt_machine awscli libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git
  no_aws_machine
  rm "$ROOT/bin/snap"
  new_instance "$(warm_tags)"
  boot_no_aws
  # The apt-get shim installs nothing: the boot says the CLI is still missing, and stops.
  [ "$status" -ne 0 ]
  [ "$(apt_calls)" = "$(printf '%s\n' '-q update' '-q install -y --no-install-recommends --no-upgrade awscli')" ]
  grep -qF "aws not found, and installing the aws CLI failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "stock Ubuntu 22.04-style and Debian 12-style images get the names their repositories have" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 liblttng-ust0 libssl3 libicu70 git
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(apt_calls | tail -n 1)" = '-q install -y --no-install-recommends --no-upgrade libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu70 git' ]
  called shutdown "-h now"
  sandbox_reset
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git
  new_instance "$(warm_tags)"
  boot_first gitlab
  [ "$status" -eq 0 ]
  # GitLab's binary needs git only: no library is looked up.
  [ "$(apt_calls)" = "$(printf '%s\n' '-q update' '-q install -y --no-install-recommends --no-upgrade git')" ]
  called shutdown "-h now"
}

@test "an apt image whose repositories have no libicu is refused before apt-get install, no park" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 libssl3 git
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  grep -qF "no package of libicu78|libicu77|" "$ROOT/out"
  [ "$(apt_calls)" = '-q update' ]
  nothing_installed github
}

@test "an apt-get update that fails for a moment (another apt holds the lists' lock) is retried, then the install goes on" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git
  echo 2 >"$ROOT/calls/apt-update-fail"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  [ "$(apt_calls)" = "$(printf '%s\n' '-q update' '-q update' '-q update' \
    '-q install -y --no-install-recommends --no-upgrade libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git')" ]
  called shutdown "-h now"
}

@test "a failing apt-get update or install is refused: nothing installed, no park" {
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git
  touch "$ROOT/calls/apt-update-fail"
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  # Retried within the bound (render-sandbox.ts: 20 s times the slowdown), then refused.
  grep -qE "apt-get update failed for [0-9]+s" "$ROOT/out"
  [ "$(apt_calls | sort -u)" = '-q update' ]
  [ "$(apt_calls | wc -l)" -ge 2 ]
  nothing_installed github
  sandbox_reset
  stock_machine
  apt_machine libkrb5-3 zlib1g liblttng-ust1 libssl3 libicu72 git
  touch "$ROOT/calls/apt-fail"
  new_instance "$(warm_tags)"
  boot_first github
  refused_prime
  grep -qF "E: Unable to locate package" "$ROOT/out"
  nothing_installed github
}

@test "a partial install left by a crashed boot is removed, never used" {
  stock_machine
  mkdir -p "$ROOT/runner/github.partial/tree"
  printf '#!/bin/bash\necho half\n' >"$ROOT/runner/github.partial/tree/run.sh"
  chmod 755 "$ROOT/runner/github.partial/tree/run.sh"
  echo half >"$ROOT/runner/github.partial/tree/half-written"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  cmp "$ROOT/runner/github/run.sh" "$REPO/test/templates/shims/runner/runner"
  [ ! -e "$ROOT/runner/github/half-written" ]
  [ ! -e "$ROOT/runner/github.partial" ]
  called shutdown "-h now"
}

@test "a runner directory with something else in it is not installed over" {
  stock_machine
  mkdir -p "$ROOT/runner/github"
  echo keep >"$ROOT/runner/github/notes"
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -ne 0 ]
  grep -qF "$ROOT/runner/github exists without run.sh: not installing over it" "$ROOT/out"
  [ "$(cat "$ROOT/runner/github/notes")" = keep ]
  [ "$(release_requests)" = '' ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "a cold launch of a stock image installs the runner before RUN starts it" {
  stock_machine
  new_instance "$(cold_tags)"
  github_config jit-cold-install
  boot_first github
  [ "$status" -eq 0 ]
  local installed started
  installed=$(grep -nF "installed the github runner" "$ROOT/out" | cut -d: -f1)
  started=$(grep -nF "starting the github runner" "$ROOT/out" | cut -d: -f1)
  ((installed < started))
  [ "$(calls_of runner)" = "$ROOT/runner/github/run.sh" ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-cold-install ]
  [ "$(cat "$ROOT/calls/runner.user")" = "$RUNNER_USER" ]
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a cold launch whose config is not there yet installs in WAIT before it polls, then RUNs" {
  stock_machine
  new_instance "$(cold_tags)"
  boot_background "$ROOT/user-data-github.sh"
  # Installed while it waits, before any config exists.
  wait_for_log "installed the github runner"
  github_config jit-wait-install
  boot_wait
  [ "$status" -eq 0 ]
  local installed waited
  installed=$(grep -nF "installed the github runner" "$ROOT/out" | cut -d: -f1)
  waited=$(grep -nF "$LOG_MODE=WAIT" "$ROOT/out" | cut -d: -f1)
  ((waited < installed))
  [ "$(grep -cF "installing the github runner" "$ROOT/out")" -eq 1 ]
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-wait-install ]
}

@test "a cold GitLab launch of a stock image runs run-single with the installed binary" {
  stock_machine
  new_instance "$(cold_tags)"
  gitlab_config https://gitlab.example.test glrt-cold-install
  boot_first gitlab
  [ "$status" -eq 0 ]
  [ "$(calls_of runner)" = "$ROOT/runner/gitlab/gitlab-runner" ]
  [ "$(head -n 1 "$ROOT/calls/runner.args")" = run-single ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
}

@test "a cold launch whose install is refused tags why, terminates, deletes its config and starts no runner" {
  stock_machine
  release_mode tamper
  # Exactly the tags scale-up's CreateFleet gives a cold launch.
  new_instance "$(launch_tags cold)"
  github_config jit-cold-refused
  boot_first github
  [ "$status" -ne 0 ]
  # Refused by the checksum, before unpacking (a tampered gzip would also fail to unpack).
  grep -qF "SHA-256 of $RELEASE_URL/github-x64.tar.gz is " "$ROOT/out"
  grep -qF "refused, nothing installed" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
  nothing_installed github
  refute param_exists
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # What the pool's back-off counts: the failure, on the instance, through the real aws CLI.
  moto_tags | grep -qE "^$TAG_START_FAILURE=RUN failed: the runner package: refused nothing installed$"
}

@test "the standalone install script installs on a stock machine, then finds the runner and fetches nothing" {
  stock_machine
  boot "$ROOT/install-runner-github.sh"
  [ "$status" -eq 0 ]
  cmp "$ROOT/runner/github/run.sh" "$REPO/test/templates/shims/runner/runner"
  [ "$(release_requests)" = /github-x64.tar.gz ]
  boot "$ROOT/install-runner-github.sh"
  [ "$status" -eq 0 ]
  [ "$(release_requests)" = /github-x64.tar.gz ]
}

@test "the standalone install script refuses a tampered download and installs nothing" {
  stock_machine
  release_mode tamper
  boot "$ROOT/install-runner-gitlab.sh"
  [ "$status" -ne 0 ]
  grep -qF "install-runner: error: the gitlab-runner binary: refused, nothing installed" "$ROOT/out"
  nothing_installed gitlab
}
