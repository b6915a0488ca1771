#!/usr/bin/env bats
# Static checks of the templates: shellcheck on the raw templates (placeholders are plain
# shell words there) and on every rendering, systemd-analyze on the rendered unit.

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)

setup_file() {
  ROOT=$(mktemp -d /tmp/cwr-static.XXXXXX)
  export ROOT
  # Sandbox paths; the endpoints are never contacted here.
  node --import tsx "$REPO/test/templates/render-sandbox.ts" --root "$ROOT" --imds http://127.0.0.1:9 \
    --aws http://127.0.0.1:9 --aws-cli aws --runner-user runner
  for provider in github gitlab; do
    node --import tsx "$REPO/bin/render-user-data.ts" --provider "$provider" >"$ROOT/production-$provider.sh"
  done
  node --import tsx "$REPO/bin/render-user-data.ts" --provider github --part unit >"$ROOT/production.service"
}

teardown_file() {
  [[ ${ROOT-} != /tmp/cwr-static.* ]] || rm -rf "$ROOT"
}

@test "shellcheck passes on the raw templates" {
  shellcheck --shell=bash "$REPO/templates/start-runner.sh" "$REPO/templates/user-data.sh"
}

@test "shellcheck passes on the rendered user data (with and without reuse), hook and production renderings of both providers" {
  shellcheck --shell=bash "$ROOT"/user-data-{github,gitlab}{,-reuse}.sh "$ROOT"/hook-{github,gitlab}.sh \
    "$ROOT"/production-{github,gitlab}.sh
}

@test "shellcheck passes on the harness, its shims and the boot benchmarks" {
  shellcheck --shell=bash "$REPO"/test/templates/{helpers,reuse-steps}.bash "$REPO"/test/templates/shims/*/* "$REPO"/bench/boot/{run.sh,install.sh,timing.bash}
}

@test "the rendered unit passes systemd-analyze verify" {
  # systemd-analyze checks that ExecStart exists and is executable: give it the sandbox hook.
  mkdir -p "$ROOT/usr/local/sbin"
  cp "$ROOT/hook-github.sh" "$ROOT/usr/local/sbin/start-runner"
  chmod 755 "$ROOT/usr/local/sbin/start-runner"
  cp "$ROOT/unit.service" "$ROOT/sandbox-start-runner.service"
  run systemd-analyze verify --man=no "$ROOT/sandbox-start-runner.service"
  echo "$output"
  [ "$status" -eq 0 ]
  # Warnings (unknown keys, bad values) do not change the status: there must be none.
  [ -z "$output" ]
}

@test "systemd-analyze verify fails on a unit whose ExecStart does not exist" {
  # The check above can fail: without the hook the same unit is refused.
  cp "$ROOT/production.service" "$ROOT/production-start-runner.service"
  run systemd-analyze verify --man=no "$ROOT/production-start-runner.service"
  [ "$status" -ne 0 ] || [ -e /usr/local/sbin/warm-runners-start-runner ]
}
