import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Provider, ReuseScope } from '../../lambdas/shared/contract';
import { renderLocalUserData, TEMPLATE_ROOT } from '../../local/instances/launch-templates';
import type { LocalReport } from '../../local/report';
import { REUSE_CACHE_DIR, REUSE_GITHUB_REPOSITORIES, REUSE_GITLAB_PROJECTS } from '../../local/reuse-run';
import { scaled } from '../support/slowdown';

/**
 * `npm run local -- --reuse` itself (issue 12): both pools reusable with a cache directory,
 * two waves of one job per repository (GitHub) and project (GitLab), the second once the
 * first parked. Each job reports what it found of earlier jobs on its machine, then plants a
 * secret in its workspace, home and temp directories and writes its scope's cache file. The
 * JSON report is what is checked: every second-wave job ran on its scope's parked instance
 * (hit rate 100%), found its scope's cache file written by the first-wave job, and nothing
 * else of it; nothing is left behind.
 */
const root = join(__dirname, '..', '..');

function runLocal(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(root, 'node_modules', 'tsx', 'dist', 'cli.mjs'), join(root, 'bin', 'local.ts'), ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * The reuse run needs the boot side (clean and park: branch reuse-boot) and scale-up's
 * affinity (reuse-up) in this tree; without them every instance terminates after its job and
 * the second wave can only miss. Until both are there the test is SKIPPED, and says why in its
 * name (never a silent pass). Seen: the boot script renders the pool's cache directory, and
 * scale-up computes the job's affinity.
 */
function pendingReason(): string | undefined {
  const missing: string[] = [];
  const machine = { prefix: 'warm-runners', awsEndpoint: 'http://127.0.0.1:9', sandboxRoot: '/tmp/unused' };
  const reuse = { scope: ReuseScope.REPOSITORY, maxJobs: 2, maxAgeSeconds: 3_600, cacheDirectories: [`${TEMPLATE_ROOT}/${REUSE_CACHE_DIR}`] };
  if (!renderLocalUserData({ name: 'p', provider: Provider.GITHUB, reuse }, machine).includes(REUSE_CACHE_DIR)) missing.push('the boot side (clean and park, branch reuse-boot)');
  const scaleUp = join(root, 'lambdas', 'scale-up');
  if (!readdirSync(scaleUp).some((f) => f.endsWith('.ts') && readFileSync(join(scaleUp, f), 'utf8').includes('affinityOf('))) missing.push("scale-up's affinity (branch reuse-up)");
  return missing.length ? `waits for ${missing.join(' and ')} to be merged: without them no instance parks with its cache` : undefined;
}
const PENDING = pendingReason();

describe('npm run local -- --reuse', () => {
  const deadlineSeconds = Math.min(3_600, scaled(600_000) / 1000);
  const scopes = REUSE_GITHUB_REPOSITORIES.length + REUSE_GITLAB_PROJECTS.length;
  it.skipIf(PENDING !== undefined)(`reuses each scope's parked instance with its cache and nothing else, leaves nothing behind, and exits 0${PENDING ? ` (SKIPPED: ${PENDING})` : ''}`, { timeout: deadlineSeconds * 1000 + scaled(100_000) }, async () => {
    const { code, stdout, stderr } = await runLocal(['--reuse', '--json', '--verbose', '--deadline', String(Math.ceil(deadlineSeconds))]);
    // On a failure: the reuse proof's failures and the notes first (the report is long), then the log's end.
    let report: LocalReport | undefined;
    try {
      report = JSON.parse(stdout) as LocalReport;
    } catch {
      // not a report: the message shows what came instead
    }
    const why = report ? JSON.stringify({ reuse: report.reuse?.failures, notes: report.notes, leftovers: report.leftoverDetail }, null, 1) : stdout.slice(0, 4000);
    expect(code, `${why}\n${stderr.slice(-3000)}`).toBe(0);
    if (!report) throw new Error('no JSON report');
    expect(report).toMatchObject({ jobs: 2 * scopes, served: 2 * scopes, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
    expect(report.leftoverDetail).toEqual({ instances: [], parameters: [], registrations: [], users: [] });
    const reuse = report.reuse!;
    expect(reuse.failures).toEqual([]);
    expect(reuse).toMatchObject({ passed: true, scopes, secondWave: scopes, hits: scopes, misses: 0, hitRate: 1 });
    const first = new Map(reuse.jobs.filter((j) => j.wave === 1).map((j) => [j.scope, j]));
    for (const j of reuse.jobs) {
      expect(j.foreign, `${j.job} read another job's secret`).toEqual([]);
      if (j.wave === 1) {
        expect(j.cacheFiles, `${j.job} is a first-wave job on a fresh machine`).toEqual([]);
        continue;
      }
      // Its scope's machine, its scope's cache file, written by its scope's first job: nothing more.
      const earlier = first.get(j.scope)!;
      expect(j.instance).toBe(earlier.instance);
      expect(j.cacheFiles).toEqual([`${j.scope.replace(/[^A-Za-z0-9._-]/g, '_')}.cache=${earlier.job}`]);
    }
    // The instances are distinct per scope: no scope's job ran on another scope's machine.
    expect(new Set([...first.values()].map((j) => j.instance)).size).toBe(scopes);
  });
});
