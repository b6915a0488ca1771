#!/bin/bash
# The reuse benchmark's runner (bench/reuse/run.sh puts it where the boot script starts the
# runner, in place of the sandbox's runner shim): like the shim it records when it started,
# then it runs the benchmark job (job.sh beside it in the sandbox root) with the settings in
# calls/job.env, records the job's start and end (`date +%s.%N`) and its output, and exits with
# the job's status. The runner starts under `env -i`, so the settings come through a file.
calls=${0%/runner/*}/calls
date +%s.%N >"$calls/runner.started"
id -un >"$calls/runner.user"
set -a
# shellcheck source=/dev/null # written by run.sh: CACHE_DIR, DEPS_URL, DEPS_SHA256
source "$calls/job.env"
set +a
start=$(date +%s.%N)
status=0
bash "${0%/runner/*}/job.sh" >"$calls/job.out" 2>&1 || status=$?
printf '%s %s\n' "$start" "$(date +%s.%N)" >"$calls/job.times"
exit "$status"
