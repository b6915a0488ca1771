#!/bin/bash
# The job of `npm run local -- --reuse` (local/reuse-run.ts sends it as each job's script; the
# fake runners run it as the runner user in the job's workspace). It records what it finds of
# earlier jobs on its machine, then leaves what a job leaves, and reports both to the harness:
#  1. finds: the cache files in the pool's cache directory (name and content: the job that
#     wrote it), and every planted secret it can read anywhere on the machine (file contents
#     below CWR_MACHINE_ROOT, the cache directory included);
#  2. leaves: its cache file (named after its repository or project, holding its job key) and a
#     secret file in its workspace, its home and the temp directories (only inside the
#     machine: never in a home of this host);
#  3. reports: one JSON file in REPORTS_DIR (set in the line the harness puts before this
#     script), outside every machine, so no cleaning reaches it.
# Variables from the fake runner: CWR_MACHINE_ROOT, CWR_JOB_ID, CWR_JOB_SCOPE, TMPDIR, HOME.
set -uo pipefail
: "${REPORTS_DIR:?} ${CWR_MACHINE_ROOT:?} ${CWR_JOB_ID:?} ${CWR_JOB_SCOPE:?}"
root=$CWR_MACHINE_ROOT
cache=$root/var/cache/ci
key=$CWR_JOB_ID
file=$(printf '%s' "$CWR_JOB_SCOPE" | tr -c 'A-Za-z0-9._-' '_').cache
mark=cwr-local-secret

cached=() found=() planted=()
for f in "$cache"/*.cache; do
  [[ -f $f ]] && cached+=("${f##*/}" "$(head -c 200 "$f" | tr -dc 'A-Za-z0-9._-')")
done
# path<TAB>owner of each planted secret readable here (grep -o: "path:match").
while IFS= read -r hit; do
  found+=("${hit%%:"$mark"*}" "${hit##*"$mark":}")
done < <(grep -rIoa --no-messages "$mark:[a-z]*-[0-9]*" "$root" | sed "s|^$root/||" | sort -u)

mkdir -p "$cache" 2>/dev/null
wrote_cache=false
{ printf '%s\n' "$key" >"$cache/$file"; } 2>/dev/null && wrote_cache=true
for d in "$PWD" "${HOME:-}" "${TMPDIR:-}" "$root/var/tmp" "$root/dev/shm"; do
  [[ $d == "$root"/* && -d $d && -w $d ]] || continue
  printf '%s:%s\n' "$mark" "$key" >"$d/.cwr-secret-$key" && planted+=("${d#"$root"/}")
done

python3 - "$REPORTS_DIR" "$key" "$CWR_JOB_SCOPE" "${root##*/}" "$wrote_cache" "${#cached[@]}" "${cached[@]}" "${#found[@]}" "${found[@]}" "${planted[@]}" <<'PY'
import json, os, sys
reports, key, scope, instance, wrote = sys.argv[1:6]
rest = sys.argv[6:]
n = int(rest[0]); cached = rest[1:1 + n]; rest = rest[1 + n:]
m = int(rest[0]); found = rest[1:1 + m]; planted = rest[1 + m:]
report = {
    "job": key, "scope": scope, "instance": instance, "wroteCache": wrote == "true",
    "cached": [{"file": cached[i], "content": cached[i + 1]} for i in range(0, n, 2)],
    "found": [{"path": found[i], "owner": found[i + 1]} for i in range(0, m, 2)],
    "planted": planted,
}
tmp = os.path.join(reports, f".{key}.json")
with open(tmp, "w") as f:
    json.dump(report, f)
os.rename(tmp, os.path.join(reports, f"{key}.json"))
PY
