#!/bin/bash
# Fake GitHub Actions runner for `npm run local`, started exactly as templates/start-runner.sh
# starts the real one: `run.sh --jitconfig <encoded>`. The encoded config is what the loopback
# GitHub (local/ci/github-server.ts) handed out: base64 of JSON with the server URL, the runner
# id and a per-runner secret. The fake connects (the runner goes online), takes the job the
# server assigns, works on it for the seconds the server names, reports it done and exits 0.
# Without a job within the server's bound it exits 1, as a runner that cannot serve would.
#
# Steps are logged one line each to $LOCAL_RUNNER_LOG (or the file local-runner-log beside
# this script names), else to stderr; the secret never is, and it reaches curl on stdin, not
# on the command line.
set -euo pipefail

# The boot script starts the runner under `env -i`, which drops $LOCAL_RUNNER_LOG: a file
# named local-runner-log beside this script may name the log instead (first line).
LOG_PATH=${LOCAL_RUNNER_LOG:-}
if [[ -z $LOG_PATH && -r $(dirname "${BASH_SOURCE[0]}")/local-runner-log ]]; then
  read -r LOG_PATH <"$(dirname "${BASH_SOURCE[0]}")/local-runner-log" || true
fi

# A log that cannot be written (another user's file) falls back to stderr rather than ending the runner.
log() {
  local line
  printf -v line '%(%Y-%m-%dT%H:%M:%SZ)T fake-github-runner[%s] %s' -1 $$ "$*"
  if [[ -z $LOG_PATH ]] || ! printf '%s\n' "$line" 2>/dev/null >>"$LOG_PATH"; then
    printf '%s\n' "$line" >&2
  fi
}

fail() {
  log "error: $*"
  exit 1
}

# A power-off signals the runner: its work ends with it rather than run on without a runner
# (bash would leave a foreground sleep running), hence every wait is a background child.
CHILD=''
on_signal() {
  # Reaped here too: a zombie left to an init that does not reap would still count as running.
  # Every background child, not only $CHILD: a signal between `sleep &` and `CHILD=$!` would
  # otherwise leave that sleep running after the runner exits.
  local -a running=()
  mapfile -t running <<<"$(jobs -p)"
  [[ -z ${running[0]} ]] || { kill "${running[@]}" 2>/dev/null; wait "${running[@]}"; } || true
  log "stopped by a signal${JOB:+ during job $JOB}"
  exit 143
}
trap on_signal TERM INT HUP
pause() {
  sleep "$1" &
  CHILD=$!
  wait "$CHILD"
  CHILD=''
}

# json FIELD... <json: the fields' values, one a line (empty when absent).
json() {
  python3 -c 'import json, sys
doc = json.load(sys.stdin)
for key in sys.argv[1:]:
    value = doc.get(key) if isinstance(doc, dict) else None
    print("" if value is None else value)' "$@"
}

STATUS='' BODY='' JOB='' WORK='' REPO='' SCRIPT='' IMAGE='' SERVICES=''
# api METHOD PATH: sets STATUS (000 when the server did not answer) and BODY.
api() {
  local out
  out=$(printf 'header = "authorization: Bearer %s"\n' "$SECRET" |
    curl -sS --noproxy '*' --max-time 10 -K - -X "$1" -w '\n%{http_code}' "$URL$2" 2>/dev/null) || true
  STATUS=${out##*$'\n'}
  [[ $STATUS =~ ^[0-9]{3}$ ]] || STATUS=000
  BODY=${out%$'\n'*}
  [[ $out == *$'\n'* ]] || BODY=''
}

[[ $# -eq 2 && $1 == --jitconfig && -n $2 ]] || fail "usage: run.sh --jitconfig <encoded config>"
config=$(printf '%s' "$2" | base64 -d 2>/dev/null) || fail "the JIT config is not base64"
{ read -r URL && read -r ID && read -r NAME && read -r SECRET; } < <(json url runnerId name secret <<<"$config" 2>/dev/null) ||
  fail "the JIT config is not one this fake understands"
[[ -n $URL && $ID =~ ^[0-9]+$ && -n $SECRET ]] || fail "the JIT config lacks url, runnerId or secret"
log "runner $NAME (id $ID) connecting to $URL"

api POST "/_local/github/runners/$ID/session"
[[ $STATUS == 200 ]] || fail "session refused (HTTP $STATUS): $BODY"
{ read -r WAIT && read -r POLL; } < <(json waitSeconds pollSeconds <<<"$BODY") || fail "session answer not understood"
log "online; waiting up to ${WAIT}s for a job"

deadline=$((SECONDS + ${WAIT%.*}))
while :; do
  api POST "/_local/github/runners/$ID/acquire"
  case $STATUS in
    200)
      { read -r JOB && read -r WORK && read -r REPO; } < <(json jobId seconds repository <<<"$BODY") || fail "job answer not understood"
      SCRIPT=$(python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin).get("script") or "")' <<<"$BODY") || fail "job answer not understood"
      # A container job: the job message's container image, and its services as "alias image command-json" lines.
      { read -r IMAGE && SERVICES=$(cat); } < <(python3 -c 'import json, sys
doc = json.load(sys.stdin)
print((doc.get("container") or {}).get("image") or "")
for s in doc.get("services") or []:
    print(s["alias"], s["image"], json.dumps(s.get("command") or []))' <<<"$BODY") || fail "job answer not understood"
      break
      ;;
    204) ;;
    404 | 401) fail "registration gone (HTTP $STATUS): $BODY" ;;
    *) log "job request failed (HTTP $STATUS); retrying" ;;
  esac
  if ((SECONDS >= deadline)); then
    api DELETE "/_local/github/runners/$ID/session"
    fail "no job within ${WAIT}s"
  fi
  pause "$POLL"
done

# run_script: the job's script, when the server sent one, as the job: in its workspace
# (_work/<repo>/<repo>, the real runner's layout), with the variables a job of the local sandbox
# gets: CWR_MACHINE_ROOT (the played machine's directory, its "/"), CWR_JOB_ID
# (github-<id>), CWR_JOB_SCOPE (owner/repo), GITHUB_REPOSITORY, GITHUB_WORKSPACE, and TMPDIR
# (the machine's /tmp). A background child, as every wait here, so a power-off ends it.
run_script() {
  local machine name workspace status=0
  machine=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  name=${REPO#*/}
  workspace=$PWD/_work/$name/$name
  mkdir -p "$workspace" || fail "cannot create the workspace $workspace"
  (cd "$workspace" && exec env CWR_MACHINE_ROOT="$machine" CWR_JOB_ID="github-$JOB" CWR_JOB_SCOPE="$REPO" GITHUB_REPOSITORY="$REPO" \
    GITHUB_WORKSPACE="$workspace" TMPDIR="$machine/tmp" bash -c "$SCRIPT") &
  CHILD=$!
  wait "$CHILD" || status=$?
  CHILD=''
  log "job $JOB script ended with status $status"
}

# report STATUS OUTPUT: a container job's outcome, as the CI service keeps a job's log, in the
# run's docker-reports directory beside the machines (npm run local -- --docker), when it exists.
report() {
  local machine dir
  machine=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dir=$machine/../docker-reports
  [[ -d $dir ]] || return 0
  python3 -c 'import json, os, sys
job, instance, image, services, status, out, left, path = sys.argv[1:]
doc = {"job": job, "instance": instance, "image": image, "services": [l.split(" ")[1] for l in services.splitlines() if l],
       "status": int(status), "output": out[-2000:], "left": [l for l in left.splitlines() if l]}
with open(path + ".tmp", "w") as f: json.dump(doc, f)
os.replace(path + ".tmp", path)' "github-$JOB" "${machine##*/}" "$IMAGE" "$SERVICES" "$1" "$2" "$3" "$dir/github-$JOB.json" || log "could not write the job report"
}

# run_in_containers: a container job as the real runner runs `container:` and `services:` (its
# container hooks are the docker CLI): a network of the job's own, each service on it under its
# alias, the job container (an idle `tail -f /dev/null`) with the work directory mounted at
# /__w, the script run in it with docker exec, then its containers and network removed. The
# docker CLI is the machine's (bin/docker: the run's own daemon, never this host's).
run_in_containers() {
  local machine name d net alias image command status=0 out left
  machine=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  d=$machine/bin/docker name=${REPO#*/} net=github_network_$JOB
  local -a containers=() cmd
  mkdir -p "$PWD/_work/$name/$name" || fail "cannot create the workspace"
  if "$d" network create "$net" >/dev/null; then
    while read -r alias image command; do
      [[ -n $alias ]] || continue
      mapfile -t cmd < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$command")
      [[ -n ${cmd[0]-} ]] || cmd=()
      containers+=("${alias}_$JOB")
      "$d" run -d --name "${alias}_$JOB" --network "$net" --network-alias "$alias" "$image" ${cmd[@]+"${cmd[@]}"} >/dev/null || status=1
    done <<<"$SERVICES"
    containers+=("job_$JOB")
    if ((status == 0)) && "$d" create --name "job_$JOB" --network "$net" -v "$PWD/_work:/__w" -w "/__w/$name/$name" \
      -e GITHUB_REPOSITORY="$REPO" -e GITHUB_WORKSPACE="/__w/$name/$name" --entrypoint tail "$IMAGE" -f /dev/null >/dev/null &&
      "$d" start "job_$JOB" >/dev/null; then
      out=$("$d" exec "job_$JOB" sh -c "$SCRIPT" 2>&1) || status=$?
    else
      out='the job or a service container did not start' status=1
    fi
    "$d" rm -f -v "${containers[@]}" >/dev/null 2>&1 || true
    "$d" network rm "$net" >/dev/null 2>&1 || true
  else
    out='the job network was not created' status=1
  fi
  while IFS= read -r line; do log "job $JOB: $line"; done <<<"$out"
  # What the job left on the daemon: its own containers and network, which must be gone.
  left=$({ "$d" ps -aq --filter "name=_$JOB\$"; "$d" network ls -q --filter "name=$net"; } 2>/dev/null)
  log "job $JOB container script ended with status $status"
  report "$status" "$out" "$left"
}

if [[ -n $SCRIPT && -n $IMAGE ]]; then
  log "running job $JOB of $REPO: its script in a container of $IMAGE"
  run_in_containers
elif [[ -n $SCRIPT ]]; then
  log "running job $JOB of $REPO: its script"
  run_script
else
  log "running job $JOB for ${WORK}s"
  pause "$WORK"
fi
for attempt in 1 2 3 4 5; do
  api POST "/_local/github/runners/$ID/jobs/$JOB/complete"
  [[ $STATUS != 200 ]] || break
  log "reporting job $JOB failed (HTTP $STATUS, attempt $attempt)"
  ((attempt < 5)) || fail "could not report job $JOB done"
  pause 0.5
done
log "job $JOB done; exiting"
