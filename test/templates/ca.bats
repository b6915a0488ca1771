#!/usr/bin/env bats
# Extra CA certificates, the boot's side (templates/start-runner.sh, install_cas;
# docs/private-network.md): a fleet with caCertificates renders their parameter's name and
# SHA-256; the boot reads the parameter (moto, the real aws CLI), checks the digest with the real
# sha256sum, writes one file per certificate into the trust directory and updates the store,
# once per instance. Each boot runs in a mount namespace of its own with a tmpfs over
# /usr/local/share/ca-certificates: this machine's trust store is never touched (root only).

load helpers

setup_file() { sandbox_start; }
teardown_file() { sandbox_stop; }
setup() {
  needs_root 'the boot runs in a mount namespace of its own'
  sandbox_reset
  moto_aws ssm put-parameter --overwrite --name "$CA_PARAM" --type String --value "$(<"$ROOT/ca.pem")" >/dev/null
}
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

# boot_private FILE: as boot, in a private mount namespace whose trust directory is an empty tmpfs.
boot_private() {
  status=0
  # shellcheck disable=SC2016 # expanded by the inner bash
  boot_env unshare --mount --propagation private bash -c 'mount -t tmpfs cwr-ca /usr/local/share/ca-certificates && exec "$0"' "$1" >"$ROOT/out" 2>&1 || status=$?
}

@test "PRIME installs the certificates from their parameter, checked against the rendered SHA-256, before the runner" {
  new_instance "$(warm_tags)"
  boot_private "$ROOT/user-data-github-ca.sh"
  [ "$status" -eq 0 ]
  grep -qF "installed $CA_PARAM" "$ROOT/out"
  [ "$(calls_of update-ca-certificates)" = update-ca-certificates ]
  # One file per certificate (the parameter holds two), each the certificate itself.
  [ "$(ls "$ROOT/calls/ca" | tr '\n' ' ')" = 'cdk-warm-runners-1.crt cdk-warm-runners-2.crt ' ]
  diff <(cat "$ROOT/ca-1.pem"; echo) "$ROOT/calls/ca/cdk-warm-runners-1.crt"
  diff <(cat "$ROOT/ca-2.pem"; echo) "$ROOT/calls/ca/cdk-warm-runners-2.crt"
  # Before the install step: the line comes first.
  (( $(grep -nF "installed $CA_PARAM" "$ROOT/out" | cut -d: -f1) < $(grep -nF 'primed; powering off' "$ROOT/out" | cut -d: -f1) ))
}

@test "a cold RUN installs them before its runner starts, and a later boot of the same instance does not again" {
  new_instance "$(cold_tags)"
  github_config jit-ca
  boot_private "$ROOT/user-data-github-ca.sh"
  [ "$status" -eq 0 ]
  grep -qF "installed $CA_PARAM" "$ROOT/out"
  (( $(grep -nF "installed $CA_PARAM" "$ROOT/out" | cut -d: -f1) < $(grep -nF 'starting the github runner' "$ROOT/out" | cut -d: -f1) ))
  [ "$(calls_of update-ca-certificates | wc -l)" -eq 1 ]
  # The marker holds this instance's id: a second install_cas (a WAIT, a reboot) reads no parameter.
  [ "$(cat "$ROOT/var/lib/warm-runners/cas")" = "$INSTANCE_ID" ]
}

@test "a parameter whose value is not the rendered digest fails the boot: nothing is installed" {
  moto_aws ssm put-parameter --overwrite --name "$CA_PARAM" --type String --value "$(sed 's/^MII/MIJ/' "$ROOT/ca.pem")" >/dev/null
  new_instance "$(warm_tags)"
  boot_private "$ROOT/user-data-github-ca.sh"
  [ "$status" -ne 0 ]
  grep -qF "$CA_PARAM has SHA-256" "$ROOT/out"
  [ ! -e "$ROOT/calls/update-ca-certificates" ]
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "a missing parameter fails the boot instead of starting a runner that cannot trust its CI server" {
  moto_aws ssm delete-parameter --name "$CA_PARAM" >/dev/null
  new_instance "$(cold_tags)"
  github_config jit-ca-missing
  boot_private "$ROOT/user-data-github-ca.sh"
  [ "$status" -ne 0 ]
  grep -qF "cannot read $CA_PARAM" "$ROOT/out"
  [ ! -e "$ROOT/calls/runner" ]
}

@test "without caCertificates the boot installs nothing" {
  new_instance "$(warm_tags)"
  boot_private "$ROOT/user-data-github.sh"
  [ "$status" -eq 0 ]
  ! grep -qF "$CA_PARAM" "$ROOT/out"
  [ ! -e "$ROOT/calls/update-ca-certificates" ]
}
