/**
 * `npm run local -- --docker`: every job is a container job on the example's pools with their
 * Docker (the `docker` prop): a GitHub job with `container:` and a service, a GitLab job with
 * `image:` and a service, all of the run's busybox image (local/docker-daemon.ts). The fake
 * runners run them as the real executors do (local/runner/run.sh, gitlab-runner) and write each
 * job's outcome to the run's docker-reports directory, as a CI service keeps a job's log.
 * `buildDockerProof` is pure: its rules are table-tested (test/local/orch-docker.test.ts).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LocalJobOptions } from './ci/server-basics';
import { LOCAL_DOCKER_IMAGE, LOCAL_DOCKER_IMAGE_MARK } from './docker-daemon';

/** The reports directory's name, beside the machines in the sandbox (the fake runners look for it there). */
export const DOCKER_REPORTS_DIR = 'docker-reports';

/** What the job prints, run in its container: the image it ran in and its service's answer. */
const SERVICE_ANSWER = 'service-ok';
function jobScript(alias: string): string {
  return [
    'set -e',
    'image=$(cat /etc/cwr-image)',
    // nc, not wget: the static busybox's wget crashes (SIGSEGV) in these containers. A few
    // tries: like the real runners without a health check, nothing waits for the service.
    "service=''",
    `for i in 1 2 3 4 5 6 7 8 9 10; do service=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${alias} 8080 | grep -o ${SERVICE_ANSWER} || true); [ -n "$service" ] && break; sleep 1; done`,
    'echo "image=$image service=$service"',
    `test "$image" = ${LOCAL_DOCKER_IMAGE_MARK}`,
    `test "$service" = ${SERVICE_ANSWER}`,
  ].join('\n');
}

/** The container jobs of the run, per provider: GitHub's service is "db", GitLab's "cache". */
export const DOCKER_JOBS: Readonly<Record<'github' | 'gitlab', LocalJobOptions>> = {
  github: { script: jobScript('db'), containers: { image: LOCAL_DOCKER_IMAGE, services: [{ alias: 'db', image: LOCAL_DOCKER_IMAGE }] } },
  gitlab: { script: jobScript('cache'), containers: { image: LOCAL_DOCKER_IMAGE, services: [{ alias: 'cache', image: LOCAL_DOCKER_IMAGE }] } },
};

/** A fake runner's report of one container job. */
export interface DockerJobReport {
  readonly job: string;
  readonly instance: string;
  readonly image: string;
  readonly services: readonly string[];
  readonly status: number;
  readonly output: string;
  /** Its containers and network still on the daemon after its teardown. */
  readonly left: readonly string[];
}

export function readDockerReports(dir: string): Record<string, DockerJobReport> {
  const out: Record<string, DockerJobReport> = {};
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir).filter((n) => /^[a-z]+-\d+\.json$/.test(n))) {
    try {
      const r = JSON.parse(readFileSync(join(dir, name), 'utf8')) as DockerJobReport;
      out[r.job] = r;
    } catch {
      // not a complete report (the writers rename complete files into place)
    }
  }
  return out;
}

/** The daemon at the end of the run: what must be gone, and the image that must stay. */
export interface DockerDaemonState {
  readonly containers: readonly string[];
  readonly networks: readonly string[];
  readonly volumes: readonly string[];
  readonly imageKept: boolean;
}

/** The Docker install step's seconds on each machine that installed it (boot log timestamps). */
export interface DockerInstallFigure {
  readonly installs: number;
  readonly medianSeconds: number;
  readonly maxSeconds: number;
}

export interface DockerProof {
  readonly passed: boolean;
  readonly failures: readonly string[];
  readonly jobs: number;
  readonly ranInContainers: number;
  readonly install: DockerInstallFigure;
  readonly daemon: DockerDaemonState;
}

/**
 * Passes when every job sent reported, ran in a container of the run's image with its service
 * reachable by its alias (its script's own checks, status 0, and its output saying so), left
 * none of its containers or network, and the daemon holds no container, network or volume at
 * the end while the image is still there; and at least one machine installed Docker.
 */
export function buildDockerProof(jobs: readonly { provider: string; ciJobId: string }[], reports: Readonly<Record<string, DockerJobReport>>, daemon: DockerDaemonState, install: DockerInstallFigure): DockerProof {
  const failures: string[] = [];
  let ran = 0;
  for (const j of jobs) {
    const key = `${j.provider}-${j.ciJobId}`;
    const r = reports[key];
    if (!r) {
      failures.push(`${key} wrote no container report: it did not run as a container job`);
      continue;
    }
    const ok = r.status === 0 && r.image === LOCAL_DOCKER_IMAGE && r.output.includes(`image=${LOCAL_DOCKER_IMAGE_MARK} service=${SERVICE_ANSWER}`);
    if (ok) ran++;
    else failures.push(`${key} on ${r.instance}: status ${r.status}, image ${r.image}, output ${JSON.stringify(r.output.slice(-300))}`);
    if (r.services.length === 0) failures.push(`${key} ran without its service container`);
    if (r.left.length) failures.push(`${key} left ${r.left.join(', ')} on the daemon`);
  }
  for (const [what, ids] of [['containers', daemon.containers], ['networks', daemon.networks], ['volumes', daemon.volumes]] as const) {
    if (ids.length) failures.push(`the daemon still holds ${ids.length} ${what} at the end: ${ids.join(', ')}`);
  }
  if (!daemon.imageKept) failures.push(`the image ${LOCAL_DOCKER_IMAGE} is gone: images are the cache and must stay`);
  if (install.installs === 0) failures.push('no machine installed Docker');
  return { passed: failures.length === 0 && jobs.length > 0, failures: jobs.length ? failures : [...failures, 'no job was sent'], jobs: jobs.length, ranInContainers: ran, install, daemon };
}

const STAMP = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{3})?Z) start-runner\[\d+\]:.* (installing Docker \(|Docker is ready$)/;

/** From each machine's console log: the seconds from "installing Docker" to "Docker is ready". */
export function dockerInstallFigure(consoleLogs: readonly string[]): DockerInstallFigure {
  const seconds: number[] = [];
  for (const text of consoleLogs) {
    let began: number | undefined;
    for (const line of text.split('\n')) {
      const m = STAMP.exec(line);
      if (!m) continue;
      const t = Date.parse(m[1]!);
      if (m[2]!.startsWith('installing')) began = t;
      else if (began !== undefined) {
        seconds.push((t - began) / 1000);
        began = undefined;
      }
    }
  }
  seconds.sort((a, b) => a - b);
  return { installs: seconds.length, medianSeconds: seconds.length ? seconds[Math.floor(seconds.length / 2)]! : 0, maxSeconds: seconds.length ? seconds[seconds.length - 1]! : 0 };
}

export function formatDockerProof(p: DockerProof): string[] {
  const lines = [
    `docker: ${p.passed ? 'PASSED' : 'FAILED'}: ${p.ranInContainers} of ${p.jobs} jobs ran in containers with their service; the daemon holds ${p.daemon.containers.length} containers, ${p.daemon.networks.length} networks, ${p.daemon.volumes.length} volumes, image ${p.daemon.imageKept ? 'kept' : 'GONE'}`,
    `  Docker install step (sandbox: a shim installs, the run's daemon answers): ${p.install.installs} machines, median ${p.install.medianSeconds.toFixed(2)} s, max ${p.install.maxSeconds.toFixed(2)} s`,
  ];
  for (const f of p.failures) lines.push(`  FAILED: ${f}`);
  return lines;
}
