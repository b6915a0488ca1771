import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LocalReport } from '../../local/report';
import { LOCAL_ROLLED_VERSION, LOCAL_RUNNER_VERSION } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * `npm run local -- --roll`: the pools follow the newest runner release, which the loopback
 * release server publishes as GitHub's and GitLab's release data; once the pools filled it
 * publishes a newer one. The release resolver stores it, the pool replaces the parked
 * instances of the older runner a few at a time, the jobs go once every parked instance
 * carries the newer one, and none of them runs the older runner; nothing is left behind.
 */
const root = join(__dirname, '..', '..');

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

/** The resolver's and the pool's lines about the roll (the --verbose Lambda log lines on stderr). */
function lines(stderr: string, fn: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of stderr.split('\n')) {
    const m = new RegExp(`^\\s+\\[${fn}\\] (\\{.*\\})$`).exec(line);
    if (m) out.push(JSON.parse(m[1]!) as Record<string, unknown>);
  }
  return out;
}

describe('npm run local -- --roll (runner updates)', () => {
  const deadlineSeconds = Math.min(3_600, scaled(300_000) / 1000);
  it('rolls the parked instances over to the newer release before the jobs, no job runs the older runner, nothing is left behind', { timeout: deadlineSeconds * 1000 + scaled(100_000) }, async () => {
    const { code, stdout, stderr } = await runLocal(['--roll', '--json', '--verbose', '--deadline', String(Math.ceil(deadlineSeconds))]);
    expect(code, `${stdout.slice(0, 4000)}\n${stderr.slice(-2000)}`).toBe(0);
    const report = JSON.parse(stdout) as LocalReport;
    expect(report).toMatchObject({ jobs: 10, served: 10, unserved: 0, leftovers: 0, settled: true });
    expect(report.roll).toMatchObject({ from: LOCAL_RUNNER_VERSION, to: LOCAL_ROLLED_VERSION, jobsOnOtherRunner: [], passed: true });
    // Every parked instance of both pools (3 each) was replaced for its runner.
    expect(report.roll!.replaced).toBeGreaterThanOrEqual(6);
    // The resolver stored each provider's first release, then the newer one, and nothing it refused.
    const resolved = lines(stderr, 'runner-release').filter((l) => l.message === 'runner release resolved');
    for (const provider of ['github', 'gitlab']) {
      expect(resolved.filter((l) => l.provider === provider).map((l) => l.version)).toEqual([LOCAL_RUNNER_VERSION, LOCAL_ROLLED_VERSION]);
    }
    expect(lines(stderr, 'runner-release').filter((l) => l.level === 'error')).toEqual([]);
  });
});
