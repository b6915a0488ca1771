#!/usr/bin/env bats
# The RunnerImage's install component in the boot sandbox: its ExecuteBash step, taken from
# the synthesized component document (render-image-component.ts), run the way install.bats runs
# the install step: a stock machine, the loopback release server, the same shims. Issue 10, section 2.

load helpers

setup_file() {
  sandbox_start
  node --import tsx "$REPO/test/templates/render-image-component.ts" --root "$ROOT" --runner-user "$RUNNER_USER" \
    --release "$RELEASE_URL" --release-dir "$ROOT/release"
}
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

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

@test "the image's own steps run after the install step: a shell step finds the runner user and runner, Docker comes from the distribution" {
  stock_machine
  # What cannot run here: usermod and docker record their calls (this machine's users stay as
  # they are); the docker package's unit, as dnf would install it, for the systemctl shim.
  mkdir -p "$ROOT/image-shims" "$ROOT/etc/systemd/system"
  for tool in usermod docker; do
    printf '#!/bin/bash\nprintf "%%s\\n" "$*" >>"$SHIM_CALLS/%s"\n' "$tool" >"$ROOT/image-shims/$tool"
    chmod +x "$ROOT/image-shims/$tool"
  done
  touch "$ROOT/etc/systemd/system/docker.service"
  export EXTRA_PATH=$ROOT/image-shims
  boot "$ROOT/image-component-github.sh"
  [ "$status" -eq 0 ]
  boot "$ROOT/image-step-github-1.sh"
  [ "$status" -eq 0 ]
  [ "$(calls_of image-steps)" = "$RUNNER_USER" ]
  boot "$ROOT/image-step-github-2.sh"
  [ "$status" -eq 0 ]
  # The runner's OS packages (install step), then Docker's, from the one package manager.
  [ "$(calls_of dnf)" = $'install -y lttng-ust openssl-libs krb5-libs zlib libicu git\ninstall -y docker' ]
  called systemctl 'enable docker.service'
  [ "$(calls_of usermod)" = "-aG docker $RUNNER_USER" ]
  [ "$(calls_of docker)" = --version ]
}

@test "an image step that fails fails the build" {
  stock_machine
  boot "$ROOT/image-step-github-1.sh"
  # Without the install step there is no runner: the probe's `test -x` fails, and set -e stops there.
  [ "$status" -ne 0 ]
}
