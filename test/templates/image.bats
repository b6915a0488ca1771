#!/usr/bin/env bats
# The RunnerImage's install component in the boot sandbox: its ExecuteBash step, taken from
# the synthesized component document (render-image-component.ts), run the way install.bats runs
# the install step: a stock machine, the loopback release server, the same shims. Issue 10, section 2.

load helpers
load docker-daemon

setup_file() {
  sandbox_start
  node --import tsx "$REPO/test/templates/render-image-component.ts" --root "$ROOT" --runner-user "$RUNNER_USER" \
    --release "$RELEASE_URL" --release-dir "$ROOT/release"
}
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() {
  [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot
  docker_daemon_stop
}

@test "the image component installs the runner user, the pinned package and its OS packages on a stock machine" {
  stock_machine
  boot "$ROOT/image-component-github.sh"
  [ "$status" -eq 0 ]
  [ "$(calls_of useradd)" = "--create-home --user-group --shell /bin/bash $RUNNER_USER" ]
  [ "$(calls_of dnf)" = 'install -y lttng-ust openssl-libs krb5-libs zlib libicu git' ]
  [ "$(release_requests)" = /github-x64.tar.gz ]
  [ -x "$ROOT/runner/github/config.sh" ]
  cmp "$ROOT/runner/github/run.sh" "$REPO/test/templates/shims/runner/runner"
  [ "$(stat -c %U "$ROOT/runner/github/run.sh")" = "$RUNNER_USER" ]
  grep -qF "installed the github runner sandbox-1" "$ROOT/out"
  # A build of the image never boots a runner or parks.
  [ ! -e "$ROOT/calls/runner" ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "an arm64 build instance installs the arm64 package" {
  stock_machine
  echo aarch64 >"$ROOT/calls/arch"
  boot "$ROOT/image-component-github.sh"
  [ "$status" -eq 0 ]
  [ "$(release_requests)" = /github-arm64.tar.gz ]
  [ "$(cat "$ROOT/runner/github/ARCH")" = arm64 ]
}

@test "a tampered download fails the build step and installs nothing" {
  stock_machine
  release_mode tamper
  boot "$ROOT/image-component-github.sh"
  [ "$status" -ne 0 ]
  grep -qF "refused, nothing installed" "$ROOT/out"
  [ ! -e "$ROOT/runner/github" ]
  [ ! -e "$ROOT/runner/github.partial" ]
}

@test "a parent image that has the runner installs nothing and fetches nothing" {
  boot "$ROOT/image-component-github.sh"
  [ "$status" -eq 0 ]
  [ -z "$(release_requests)" ]
  [ ! -e "$ROOT/calls/useradd" ]
}

@test "the image's own steps run after the install step: a shell step finds the runner user and runner, the Docker step is the boot's install_docker" {
  needs_root 'dockerd runs as root'
  needs_docker
  stock_machine
  # The build instance's daemon is the test's own (the docker shim talks to it); the dnf shim's
  # docker package brings the docker group and docker.service (docker.bats plays the same).
  docker_daemon_start "$ROOT/docker"
  printf '%s\n' "$DOCKER_SOCK" >"$ROOT/calls/docker-host"
  boot "$ROOT/image-component-github.sh"
  [ "$status" -eq 0 ]
  boot "$ROOT/image-step-github-1.sh"
  [ "$status" -eq 0 ]
  [ "$(calls_of image-steps)" = "$RUNNER_USER" ]
  boot "$ROOT/image-step-github-2.sh"
  [ "$status" -eq 0 ]
  # The runner's OS packages (install step), then Docker's, from the one package manager; the
  # runner the install step put there is kept (fetched once).
  [ "$(calls_of dnf)" = $'install -y lttng-ust openssl-libs krb5-libs zlib libicu git\ninstall -y docker' ]
  [ "$(release_requests)" = /github-x64.tar.gz ]
  [ "$(calls_of usermod)" = "-aG docker $RUNNER_USER" ]
  called systemctl 'enable --now docker'
  # The build waits for the daemon to answer: an image whose Docker does not start is not published.
  grep -qF 'Docker is ready' "$ROOT/out"
}

@test "an image step that fails fails the build" {
  stock_machine
  boot "$ROOT/image-step-github-1.sh"
  # Without the install step there is no runner: the probe's `test -x` fails, and set -e stops there.
  [ "$status" -ne 0 ]
}
