# shellcheck shell=bash
# A Docker daemon of the test's own (never this host's): its own data and exec roots and socket
# under DIR, the vfs storage driver, no default bridge and no iptables rules, in a network
# namespace of its own (unshare --net): the networks the jobs make live there, and go with it. No registry is reachable: the
# image is `docker import` of a root file system holding Debian's static busybox.
#
# docker_daemon_start DIR: starts it, waits (bounded) until it answers; sets DOCKER_SOCK
# (unix://...) and DOCKER_PIDFILE, and imports BUSYBOX_IMAGE. The socket is open to every user:
# the runner user uses it without the docker group of this host.
# docker_daemon_stop: its containers and networks removed, then stopped by its pid, its mounts
# undone and DIR removed.

BUSYBOX_IMAGE=cwr-busybox:test

# docker_cli ARGS...: the real CLI at the test's daemon.
docker_cli() { DOCKER_HOST=$DOCKER_SOCK /usr/bin/docker "$@"; }

# needs_docker: for setup_file: skips without dockerd and busybox-static (fails instead under
# CI, which installs them: .ci/run). Debian's paths: the shims call /usr/bin/docker.
needs_docker() {
  if [[ -x /usr/sbin/dockerd && -x /usr/bin/docker && -x /bin/busybox ]] && ! ldd /bin/busybox &>/dev/null; then return 0; fi
  if [[ -n ${CI-} ]]; then
    echo 'CI is set but dockerd or a static /bin/busybox is missing (apt-get install docker.io busybox-static)' >&2
    return 1
  fi
  skip 'needs dockerd and busybox-static (apt-get install docker.io busybox-static)'
}

docker_daemon_start() {
  local dir=$1 bound end fs
  DOCKER_DIR=$dir
  mkdir -p "$dir/data" "$dir/exec"
  chmod 755 "$dir"
  DOCKER_SOCK=unix://$dir/d.sock DOCKER_PIDFILE=$dir/d.pid
  export DOCKER_SOCK DOCKER_PIDFILE DOCKER_DIR BUSYBOX_IMAGE
  # In a network namespace of its own: its networks' bridges and traffic never touch this host's.
  unshare --net -- dockerd --storage-driver vfs --data-root "$dir/data" --exec-root "$dir/exec" --host "$DOCKER_SOCK" \
    --pidfile "$DOCKER_PIDFILE" --bridge none --iptables=false --ip-masq=false >"$dir/d.log" 2>&1 &
  bound=$(scaled_seconds 60)
  end=$((SECONDS + bound))
  until docker_cli version >/dev/null 2>&1; do
    ((SECONDS < end)) || { echo "the test's dockerd did not answer within $bound s" >&2 && tail -n 20 "$dir/d.log" >&2 && return 1; }
    sleep 0.2
  done
  chmod 666 "$dir/d.sock"
  fs=$(mktemp -d "$dir/rootfs.XXXXXX")
  mkdir -p "$fs/bin" "$fs/tmp" "$fs/data"
  cp /bin/busybox "$fs/bin/busybox"
  for c in sh sleep echo cat ls nc hostname; do ln -s busybox "$fs/bin/$c"; done
  tar -C "$fs" -c . | docker_cli import - "$BUSYBOX_IMAGE" >/dev/null
  rm -rf "$fs"
}

docker_daemon_stop() {
  [[ -n ${DOCKER_DIR-} && -n ${DOCKER_PIDFILE-} ]] || return 0
  local pid='' m i
  if [[ -r $DOCKER_PIDFILE ]]; then
    read -r pid <"$DOCKER_PIDFILE" || true
    # Its networks' bridges live in this host's namespace: removed while it still runs.
    docker_cli ps -aq 2>/dev/null | xargs -r env DOCKER_HOST="$DOCKER_SOCK" /usr/bin/docker rm -f >/dev/null 2>&1 || true
    docker_cli network prune -f >/dev/null 2>&1 || true
  fi
  if [[ $pid =~ ^[0-9]+$ ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150 && $(kill -0 "$pid" 2>/dev/null && echo 1 || echo 0); i++)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$DOCKER_DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
  rm -rf "$DOCKER_DIR"
}
