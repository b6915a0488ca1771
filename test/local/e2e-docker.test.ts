import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { dockerUnavailable } from '../../local/docker-daemon';
import type { LocalReport } from '../../local/report';
import { scaled } from '../support/slowdown';

/**
 * `npm run local -- --docker` itself (issue 24): the example's pools keep their Docker, the run
 * starts a Docker daemon of its own, and every job is a container job: GitHub `container:` with
 * a service, GitLab `image:` with a service on the docker executor. The JSON report is what is
 * checked: every job served, each ran in a container of the run's image and reached its service
 * by its alias, nothing of them is left on the daemon, the image stays, nothing is left behind.
 * Needs root, dockerd and busybox-static: SKIPPED without them, and says why; CI (root, with
 * both installed by .ci/run) never skips it.
 */
const root = join(__dirname, '..', '..');
const UNAVAILABLE = dockerUnavailable();
if (UNAVAILABLE && process.env.CI) throw new Error(`CI is set but the docker run cannot run here: ${UNAVAILABLE}`);

function runLocal(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'bin', 'local.ts'), ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('npm run local -- --docker', () => {
  const deadlineSeconds = Math.min(3_600, scaled(600_000) / 1000);
  const jobs = 2;
  it.skipIf(UNAVAILABLE !== undefined)(
    `serves GitHub container+services jobs and GitLab image: jobs on a real daemon, leaves nothing on it or behind, and exits 0${UNAVAILABLE ? ` (SKIPPED: ${UNAVAILABLE})` : ''}`,
    { timeout: deadlineSeconds * 1000 + scaled(100_000) },
    async () => {
      const { code, stdout, stderr } = await runLocal(['--docker', '--jobs', String(jobs), '--json', '--verbose', '--deadline', String(Math.ceil(deadlineSeconds))]);
      let report: LocalReport | undefined;
      try {
        report = JSON.parse(stdout) as LocalReport;
      } catch {
        // not a report: the message shows what came instead
      }
      const why = report ? JSON.stringify({ docker: report.docker?.failures, notes: report.notes, leftovers: report.leftoverDetail }, null, 1) : stdout.slice(0, 4000);
      expect(code, `${why}\n${stderr.slice(-3000)}`).toBe(0);
      if (!report) throw new Error('no JSON report');
      expect(report).toMatchObject({ jobs: 2 * jobs, served: 2 * jobs, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
      const docker = report.docker!;
      expect(docker.failures).toEqual([]);
      expect(docker).toMatchObject({ passed: true, jobs: 2 * jobs, ranInContainers: 2 * jobs, daemon: { containers: [], networks: [], volumes: [], imageKept: true } });
      // Every machine of the stock image installed Docker (while priming, or cold before RUN).
      expect(docker.install.installs).toBeGreaterThan(0);
    },
  );
});
