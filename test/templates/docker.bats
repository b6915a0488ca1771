#!/usr/bin/env bats
# Docker on a pool (the `docker` prop, docs/docker.md) in the boot sandbox, against a real
# Docker daemon of this test's own (docker-daemon.bash): the install step installs Docker (the
# dnf shim stands in for the package: it brings the docker group and docker.service), enables
# and starts it, adds the runner user to the docker group (usermod shim) and waits for the
# daemon while priming and on a cold launch, never on a warm activation; GitLab's docker
# executor gets its flags; and the reuse cleaning removes the job's containers, networks and
# volumes and keeps the images. Cleaning kills every process of the runner user: root only,
# with a user of its own.

load helpers
load reuse-steps
load docker-daemon

REUSE_USER=cwr-dreuse
export REUSE_USER

setup_file() {
  needs_root 'the reuse cleaning kills every process of the runner user, and dockerd runs as root'
  needs_docker
  id "$REUSE_USER" &>/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin "$REUSE_USER"
  sandbox_start
  docker_daemon_start "$ROOT/docker"
}
teardown_file() {
  docker_daemon_stop
  sandbox_stop
}
setup() {
  sandbox_reset
  STATE_DIR=$ROOT/var/lib/warm-runners
  # The machine's daemon is the test's own (the docker shim reads it).
  printf '%s\n' "$DOCKER_SOCK" >"$ROOT/calls/docker-host"
  chmod 644 "$ROOT/calls/docker-host"
}
teardown() { [[ -z ${BATS_TEST_COMPLETED-} ]] && show_boot || true; }

# ready_line: the line number of the install step's "Docker is ready" in the boot output.
ready_line() { grep -nF 'Docker is ready' "$ROOT/out" | head -n 1 | cut -d: -f1; }

@test "docker: PRIME installs Docker, enables and starts the daemon, lets the runner user use it, waits for it, then parks" {
  new_instance "$(warm_tags)"
  boot_first github-docker
  [ "$status" -eq 0 ]
  [ "$(calls_of dnf)" = 'install -y docker' ]
  [ "$(calls_of usermod)" = "-aG docker $RUNNER_USER" ]
  called systemctl 'enable --now docker'
  grep -qF 'installing Docker (docker)' "$ROOT/out"
  # Ready before the prepare commands (which may pull images), and parked after them.
  (($(ready_line) < $(grep -nF 'prepare command 1/' "$ROOT/out" | head -n 1 | cut -d: -f1)))
  called shutdown '-h now'
}

@test "docker: an image that has Docker installs nothing, and still checks its daemon before parking" {
  : >"$ROOT/calls/docker-package"
  new_instance "$(warm_tags)"
  boot_first github-docker
  [ "$status" -eq 0 ]
  [ ! -e "$ROOT/calls/dnf" ]
  called systemctl 'enable --now docker'
  [ -n "$(ready_line)" ]
  called shutdown '-h now'
}

@test "docker: a daemon that does not answer fails the PRIME: the standby does not park" {
  rm -f "$ROOT/calls/docker-host"
  new_instance "$(warm_tags)"
  boot_first github-docker
  [ "$status" -ne 0 ]
  grep -qF 'the Docker daemon did not answer within' "$ROOT/out"
  grep -qF 'PRIME failed' "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [ "$(instance_state)" = running ]
}

@test "docker: a failed install fails the PRIME like a failed runner install" {
  touch "$ROOT/calls/dnf-fail"
  new_instance "$(warm_tags)"
  boot_first github-docker
  [ "$status" -ne 0 ]
  grep -qF 'installing Docker (docker) failed' "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
}

@test "docker: a cold launch installs Docker before RUN starts the runner" {
  new_instance "$(cold_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 1)\"")"
  github_config jit-cold-docker
  boot_first github-docker
  [ "$status" -eq 0 ]
  [ "$(calls_of dnf)" = 'install -y docker' ]
  (($(ready_line) < $(grep -nF 'starting the github runner' "$ROOT/out" | cut -d: -f1)))
  [ "$(sed -n 2p "$ROOT/calls/runner.args")" = jit-cold-docker ]
}

@test "docker: a warm activation (the hook) neither installs Docker nor waits for it" {
  new_instance "$(warm_tags)"
  boot_first github-docker
  [ "$status" -eq 0 ]
  rm -f "$ROOT/calls/systemctl" "$ROOT/calls/dnf" "$ROOT/calls/usermod" "$ROOT/calls/shutdown"
  set_tags "$(warm_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 1)\"")"
  github_config jit-warm-docker
  boot_hook
  [ "$status" -eq 0 ]
  grep -qF 'starting the github runner' "$ROOT/out"
  [ -z "$(ready_line)" ]
  [ ! -e "$ROOT/calls/dnf" ]
  [ ! -e "$ROOT/calls/usermod" ]
  refute grep -q docker "$ROOT/calls/systemctl"
}

@test "docker: GitLab runs the docker executor with the pool's image, pull policy and volumes, unprivileged" {
  new_instance "$(cold_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 1)\"")"
  gitlab_config https://gitlab.example.test glrt-docker
  boot_first gitlab-docker
  [ "$status" -eq 0 ]
  local args
  args=$(tr '\n' ' ' <"$ROOT/calls/runner.args")
  [[ $args == *'--executor docker '* ]]
  [[ $args == *'--docker-image alpine:3 --docker-pull-policy if-not-present --docker-volumes /cache '* ]]
  [[ $args != *--docker-privileged* ]]
}

@test "docker: without the prop GitLab keeps the shell executor and nothing of Docker runs" {
  new_instance "$(cold_tags "\"$TAG_ACTIVATED\":\"$(iso_ago 1)\"")"
  gitlab_config https://gitlab.example.test glrt-shell
  boot_first gitlab
  [ "$status" -eq 0 ]
  [[ $(tr '\n' ' ' <"$ROOT/calls/runner.args") == *'--executor shell '* ]]
  [[ $(tr '\n' ' ' <"$ROOT/calls/runner.args") != *--docker-* ]]
  [ ! -e "$ROOT/calls/dnf" ]
}

# What a container job leaves: a running service container on a user network with a volume,
# and a stopped job container; the image is the cache.
DOCKER_JOB='set -eu
D=$ROOT/bin/docker
$D network create cwr-job-net
$D volume create cwr-job-vol
$D run -d --name cwr-service --network cwr-job-net --network-alias db -v cwr-job-vol:/data $IMAGE sleep 300
$D run --name cwr-job --network cwr-job-net -v cwr-job-vol:/data $IMAGE sh -c "echo built >/data/out"
echo left-behind'

# What the next job sees of Docker: containers, networks of its own (not the daemon'"'"'s), volumes, images.
DOCKER_LOOK='D=$ROOT/bin/docker
{
  echo "containers: $($D ps -aq | wc -l)"
  echo "networks: $($D network ls -q --filter type=custom | wc -l)"
  echo "volumes: $($D volume ls -q | wc -l)"
  echo "image: $($D image ls -q $IMAGE | wc -l)"
} >"$CALLS/job2.docker"
echo looked'

# docker_reuse_first_job: a primed reusable GitHub standby with Docker, activated for its first
# job (the caller writes the job, then boots the hook).
docker_reuse_first_job() {
  reuse_provider github
  mkdir -p "$REUSE_HOME" "$ROOT/var/tmp" "$ROOT/dev/shm"
  chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/dev/shm"
  chown -R "$REUSE_USER:" "$REUSE_HOME" "$ROOT/runner/github"
  new_instance "$(launch_tags standby)"
  boot_first github-docker-reuse
  [ "$status" -eq 0 ]
  rm -f "$ROOT/calls/shutdown"
  activate 1
  reuse_config "$AFF" 0 jit-first
}

@test "docker reuse: the next job finds none of the last job's containers, networks or volumes, and its images" {
  docker_reuse_first_job
  job "ROOT=$ROOT IMAGE=$BUSYBOX_IMAGE
$DOCKER_JOB"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx left-behind "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  assert_parked 1
  # Cleaned, seen from outside: nothing of the job's, the image kept.
  [ -z "$(docker_cli ps -aq)" ]
  [ -z "$(docker_cli network ls -q --filter type=custom)" ]
  [ -z "$(docker_cli volume ls -q)" ]
  [ -n "$(docker_cli image ls -q "$BUSYBOX_IMAGE")" ]
  # And seen by the next job of the same repository.
  rm -f "$ROOT/calls/shutdown" "$ROOT/calls/runner"
  activate 2
  reuse_config "$AFF" 1 jit-second
  job "ROOT=$ROOT IMAGE=$BUSYBOX_IMAGE CALLS=$ROOT/calls
$DOCKER_LOOK"
  boot_hook
  [ "$status" -eq 0 ]
  grep -qx looked "$ROOT/calls/job.out"
  [ "$(cat "$ROOT/calls/job2.docker")" = $'containers: 0\nnetworks: 0\nvolumes: 0\nimage: 1' ]
  assert_parked 2
}

@test "docker reuse: a daemon that stops answering during the job fails the cleaning: the instance terminates, never parks with the job's containers" {
  docker_reuse_first_job
  # The job leaves its containers, then the daemon stops answering (the shim's docker-down).
  job "ROOT=$ROOT IMAGE=$BUSYBOX_IMAGE
$DOCKER_JOB
touch \$ROOT/calls/docker-down"
  boot_hook
  grep -qx left-behind "$ROOT/calls/job.out" || { cat "$ROOT/calls/job.out" >&2; false; }
  grep -qF "the Docker daemon did not answer: not parking with what the job left in it" "$ROOT/out"
  grep -qF "error: cleaning after the job failed" "$ROOT/out"
  [ ! -e "$ROOT/calls/shutdown" ]
  [[ $(instance_state) =~ ^(shutting-down|terminated)$ ]]
  # What the job left is still on the daemon: the test removes it.
  [ -n "$(docker_cli ps -aq)" ]
  local c
  for c in $(docker_cli ps -aq); do docker_cli rm -f -v "$c" >/dev/null; done
  docker_cli network prune -f >/dev/null
  for c in $(docker_cli volume ls -q); do docker_cli volume rm -f "$c" >/dev/null; done
}
