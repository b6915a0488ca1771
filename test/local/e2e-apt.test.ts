import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tagKeys } from '../../lambdas/shared/contract';
import { machineAt } from '../../local/instances/machine';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * Issue 24, section 2: an Ubuntu-style (apt) pool primes and serves beside an Amazon
 * Linux-style (dnf) pool in one fleet, through the boot script as synthesized. The example's
 * GitHub pool plays an image without dnf (`--apt-pool linux-x64`): its install step runs this
 * Debian host's real apt-get (update, then the runner's OS packages by the names this
 * release's repositories have), standing in for Ubuntu's; the GitLab pool keeps the dnf shim.
 * As root only: apt-get installs what is missing on this host (docs/local.md).
 */
const APT_POOL = 'linux-x64';
const DNF_POOL = 'gitlab-docker';

/** The package's dpkg status on this host ("install ok installed" once installed). */
function dpkgStatus(name: string): string {
  try {
    return execFileSync('dpkg-query', ['-W', '-f=${Status}', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return 'not known';
  }
}

describe.runIf(process.getuid?.() === 0)('npm run local -- --apt-pool linux-x64 (root: this host\'s real apt-get)', () => {
  it('primes and serves the apt pool with apt-get and the dnf pool with dnf, in one fleet, leaving nothing behind', { timeout: scaled(600_000) }, async () => {
    const r = await runScenario({ jobs: 2, poolSize: 2, aptPools: [APT_POOL], keepSandbox: true, deadlineMs: scaled(420_000) });
    const sandboxRoot = r.fleet.machine.sandboxRoot;
    try {
      const { report } = r;
      expect(report, JSON.stringify(report, null, 2).slice(0, 4000)).toMatchObject({ jobs: 4, served: 4, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
      expect(report.parked).toEqual({ [APT_POOL]: 2, [DNF_POOL]: 2 });
      expect(report.notes).toContain(`apt pool(s) ${APT_POOL}: Ubuntu-style machines (no dnf), their install step uses this host's apt-get`);
      expect(report.timeline.filter((j) => j.pool === APT_POOL && j.served)).toHaveLength(2);
      expect(report.timeline.filter((j) => j.pool === DNF_POOL && j.served)).toHaveLength(2);

      // Every machine that booted installed its runner's OS packages with its image's manager.
      const keys = tagKeys(r.fleet.config.prefix);
      const booted = r.world.instances.filter((i) => existsSync(machineAt(join(sandboxRoot, i.id)).consoleLog));
      const picked = new Set<string>();
      for (const pool of [APT_POOL, DNF_POOL]) {
        const machines = booted.filter((i) => i.tags[keys.pool] === pool);
        // Each pool primed its standbys, and refilled after the warm jobs.
        expect(machines.length, pool).toBeGreaterThanOrEqual(2);
        for (const i of machines) {
          const m = machineAt(join(sandboxRoot, i.id));
          const console = readFileSync(m.consoleLog, 'utf8');
          expect(console, i.id).toContain('installed the');
          if (pool === APT_POOL) {
            expect(existsSync(join(m.binDir, 'dnf')), i.id).toBe(false);
            expect(existsSync(join(m.callsDir, 'dnf')), i.id).toBe(false);
            expect(console, i.id).toMatch(/: apt-get update$/m);
            // The real apt-get's own output, not a shim's.
            expect(console, i.id).toMatch(/^Reading package lists/m);
            const line = /: apt-get install -y (.+)$/m.exec(console);
            expect(line, i.id).not.toBeNull();
            const names = line![1]!.split(' ');
            expect(names[0]).toBe('libkrb5-3');
            expect(names).toContain('git');
            expect(names.some((n) => /^libicu\d+$/.test(n))).toBe(true);
            expect(names.some((n) => /^liblttng-ust/.test(n))).toBe(true);
            for (const n of names) picked.add(n);
          } else {
            expect(readFileSync(join(m.callsDir, 'dnf'), 'utf8'), i.id).toBe('install -y git\n');
            expect(console, i.id).not.toContain('apt-get');
          }
        }
      }
      // What apt-get picked is installed on this host for real.
      for (const n of picked) expect(dpkgStatus(n), n).toBe('install ok installed');
    } finally {
      rmSync(sandboxRoot, { recursive: true, force: true, maxRetries: 3 });
    }
  });
});
