#!/usr/bin/env bats
# Runner updates, the boot's side (templates/install-runner.sh: resolved_release, tag_version):
# a pool that follows the newest release installs the release the control plane resolved
# (the SSM parameter, on moto, read with the real aws CLI), checked against its SHA-256 with
# real curl and sha256sum, and tags itself with the version; not resolved yet, the rendered pin.

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() { sandbox_reset; }
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

sha_of() { sha256sum "$ROOT/release/$1" | cut -d' ' -f1; }
# resolve VERSION X64_SHA: the release the resolver would store (encodeRunnerRelease's line).
resolve() {
  moto_aws ssm put-parameter --overwrite --name "$RELEASE_PARAM_GITHUB" --type String \
    --value "$1 $RELEASE_URL/github-x64.tar.gz $2 $RELEASE_URL/github-arm64.tar.gz $(sha_of github-arm64.tar.gz) 2026-12-01T00:00:00.000Z" >/dev/null
}
unresolve() { moto_aws ssm delete-parameter --name "$RELEASE_PARAM_GITHUB" >/dev/null 2>&1 || true; }

@test "following: PRIME installs the resolved release, verified against its SHA-256, tags itself with its version and parks" {
  unresolve
  resolve sandbox-2 "$(sha_of github-x64.tar.gz)"
  stock_machine
  new_instance "$(warm_tags)"
  boot "$ROOT/user-data-github-latest.sh"
  [ "$status" -eq 0 ]
  grep -qF "installing the github runner sandbox-2 for x86_64 from $RELEASE_URL/github-x64.tar.gz" "$ROOT/out"
  grep -qF "installed the github runner sandbox-2" "$ROOT/out"
  [ -x "$ROOT/runner/github/run.sh" ]
  moto_tags | grep -qFx "$TAG_RUNNER_VERSION=sandbox-2"
  called shutdown "-h now"
}

@test "following, nothing resolved yet: the rendered pin, and its version on the instance" {
  unresolve
  stock_machine
  new_instance "$(warm_tags)"
  boot "$ROOT/user-data-github-latest.sh"
  [ "$status" -eq 0 ]
  grep -qF "no resolved runner release at $RELEASE_PARAM_GITHUB yet: installing the pinned sandbox-1" "$ROOT/out"
  grep -qF "installed the github runner sandbox-1" "$ROOT/out"
  moto_tags | grep -qFx "$TAG_RUNNER_VERSION=sandbox-1"
  called shutdown "-h now"
}

@test "following: a download that differs from the resolved SHA-256 is refused, nothing installed, no park" {
  unresolve
  # A valid digest, but another file's: what a tampered mirror or a wrong resolution looks like.
  resolve sandbox-2 "$(sha_of github-arm64.tar.gz)"
  stock_machine
  new_instance "$(warm_tags)"
  boot "$ROOT/user-data-github-latest.sh"
  [ "$status" -ne 0 ]
  grep -qF "the pin says $(sha_of github-arm64.tar.gz)" "$ROOT/out"
  grep -qF "refused, nothing installed" "$ROOT/out"
  [ ! -e "$ROOT/runner/github/run.sh" ]
  [ ! -e "$ROOT/runner/github.partial" ]
  [ ! -e "$ROOT/calls/shutdown" ]
  ! moto_tags | grep -qF "$TAG_RUNNER_VERSION="
}

@test "following: a resolved release that does not parse is refused before any download" {
  unresolve
  moto_aws ssm put-parameter --name "$RELEASE_PARAM_GITHUB" --type String --value "sandbox-2 not-a-release" >/dev/null
  stock_machine
  new_instance "$(warm_tags)"
  boot "$ROOT/user-data-github-latest.sh"
  [ "$status" -ne 0 ]
  grep -qF "the resolved runner release at $RELEASE_PARAM_GITHUB does not parse" "$ROOT/out"
  [ -z "$(release_requests)" ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "following: a resolved release with a plain-http URL off the loopback is refused before any download" {
  unresolve
  moto_aws ssm put-parameter --name "$RELEASE_PARAM_GITHUB" --type String \
    --value "sandbox-2 http://example.com/github-x64.tar.gz $(sha_of github-x64.tar.gz) $RELEASE_URL/github-arm64.tar.gz $(sha_of github-arm64.tar.gz) 2026-12-01T00:00:00.000Z" >/dev/null
  stock_machine
  new_instance "$(warm_tags)"
  boot "$ROOT/user-data-github-latest.sh"
  [ "$status" -ne 0 ]
  grep -qF "the resolved runner release at $RELEASE_PARAM_GITHUB does not parse" "$ROOT/out"
  [ -z "$(release_requests)" ]
}

@test "pinned: the pin, without reading any release" {
  resolve sandbox-2 "$(sha_of github-x64.tar.gz)"
  stock_machine
  new_instance "$(warm_tags)"
  boot_first github
  [ "$status" -eq 0 ]
  grep -qF "installed the github runner sandbox-1" "$ROOT/out"
  # A newer release is resolved, but the pinned rendering names no parameter to read it from.
  grep -qF "I_RELEASE='' " "$ROOT/user-data-github.sh"
  grep -qF "I_RELEASE=$RELEASE_PARAM_GITHUB " "$ROOT/user-data-github-latest.sh"
  moto_tags | grep -qFx "$TAG_RUNNER_VERSION=sandbox-1"
}
