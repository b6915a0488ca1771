import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Provider } from '../../lambdas/shared/contract';
import { ReuseScope } from '../../lambdas/shared/contract/reuse';
import { MACHINE_PATHS, relocateUserData, renderLocalUserData, REUSE_MACHINE_PATHS, TEMPLATE_ROOT } from '../../local/instances/launch-templates';
import { createMachine, DEFAULT_RUNNER_DIR, sessionPids } from '../../local/instances/machine';
import { canCreateUsers, hostUsers, playedUserName, playedUserPrefix, removeHostUser, RUNNER_USER_PLACEHOLDER } from '../../local/instances/runner-users';
import { REUSE_CACHE_DIR } from '../../local/reuse-run';

/**
 * Every played machine runs its runner as a user of its own (local/instances/runner-users.ts):
 * a reusable pool's cleaning ends every process of its runner user (`pkill -KILL -U`, then
 * `ps -U` to see none is left), and the machines share this host. With one shared user, one
 * machine's cleaning saw (and with a real pkill, killed) another machine's runner.
 */

const reusable = () =>
  renderLocalUserData(
    { name: 'linux', provider: Provider.GITHUB, reuse: { scope: ReuseScope.REPOSITORY, maxJobs: 10, maxAgeSeconds: 3600, cacheDirectories: [`${TEMPLATE_ROOT}/${REUSE_CACHE_DIR}`] } },
    { prefix: 'cwr', awsEndpoint: 'http://127.0.0.1:5000', sandboxRoot: '/tmp/unused', runnerUser: RUNNER_USER_PLACEHOLDER },
  );
const runnerUserOf = (userData: string) => [...userData.matchAll(/\bRUNNER_USER=(\S+)/g)].map((m) => m[1]);

describe('each played machine\'s runner user', () => {
  it('is named by its run and instance, a Linux user name, distinct per instance and per run', () => {
    const prefix = playedUserPrefix('a1b2c3');
    const a = playedUserName(prefix, 'i-0123456789abcdef0');
    const b = playedUserName(prefix, 'i-0123456789abcdef1');
    expect(a).toBe('cwra1b2c3-0123456789abcdef0');
    expect(a.length).toBeLessThanOrEqual(32);
    expect(b).not.toBe(a);
    expect(playedUserName(playedUserPrefix('d4e5f6'), 'i-0123456789abcdef0')).not.toBe(a);
    expect(playedUserPrefix()).not.toBe(playedUserPrefix());
    expect(() => playedUserName(prefix, 'i-0123456789abcdef0123456789')).toThrow(/at most 32/);
  });

  it('replaces the template\'s placeholder in its relocated user data, the boot and the install step alike', () => {
    const text = reusable();
    expect(runnerUserOf(text)).toEqual([RUNNER_USER_PLACEHOLDER]);
    const a = relocateUserData(text, '/tmp/m/i-0a', 'http://127.0.0.1:1', 'cwra1b2c3-0a');
    const b = relocateUserData(text, '/tmp/m/i-0b', 'http://127.0.0.1:2', 'cwra1b2c3-0b');
    expect(runnerUserOf(a)).toEqual(['cwra1b2c3-0a']);
    expect(runnerUserOf(b)).toEqual(['cwra1b2c3-0b']);
    for (const t of [a, b]) expect(t).not.toContain(RUNNER_USER_PLACEHOLDER);
    expect(() => relocateUserData(text, '/tmp/m/i-0a', 'http://127.0.0.1:1', 'Not A User')).toThrow(/Linux user name/);
    // A template rendered for a shared user has nothing to replace: refused, not run as the wrong user.
    const shared = renderLocalUserData({ name: 'linux', provider: Provider.GITHUB }, { prefix: 'cwr', awsEndpoint: 'http://127.0.0.1:5000', sandboxRoot: '/tmp/unused' });
    expect(() => relocateUserData(shared, '/tmp/m/i-0a', 'http://127.0.0.1:1', 'cwra1b2c3-0a')).toThrow(/names no cwr-played-runner/);
  });
});

/**
 * The rendered start logic (the hook the boot installs) with its `main` replaced by its own
 * `clean`: what a reusable machine runs after its job, before it parks.
 */
function cleaningScript(userData: string): string {
  // The marker lines (the markers also stand inside the script, quoted).
  const lines = userData.split('\n');
  const begin = lines.indexOf('# >>> cdk-warm-runners start logic: begin >>>');
  const end = lines.indexOf('# <<< cdk-warm-runners start logic: end <<<', begin);
  expect(begin).toBeGreaterThanOrEqual(0);
  const hook = lines.slice(begin, end).join('\n');
  expect(hook).toMatch(/^main "\$@"$/m);
  return `#!/bin/bash\n${hook.replace(/^main "\$@"$/m, 'clean')}`;
}

describe.runIf(canCreateUsers())('two played machines of a reusable pool (root: real users of this host)', () => {
  const prefix = playedUserPrefix();
  const ids = ['i-0000000000000000a', 'i-0000000000000000b'];
  const users = ids.map((id) => playedUserName(prefix, id));
  let root: string;
  const runners: ChildProcess[] = [];

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'cwr-users-'));
    chmodSync(root, 0o755);
  });
  afterAll(() => {
    for (const r of runners) if (r.pid !== undefined) for (const pid of sessionPids(r.pid)) process.kill(pid, 'SIGKILL');
    for (const u of users) removeHostUser(u);
    rmSync(root, { recursive: true, force: true });
  });

  it('each cleaning ends its own runner and the other machine\'s runs on; the users go at the end', async () => {
    const machines = ids.map((id, i) => {
      const dir = join(root, id);
      createMachine({ dir, instanceId: id, awsCli: '/bin/true', runnerSource: DEFAULT_RUNNER_DIR, playedUser: users[i]! });
      const userData = relocateUserData(reusable(), dir, 'http://127.0.0.1:1', users[i]);
      writeFileSync(join(dir, 'clean.sh'), cleaningScript(userData), { mode: 0o755 });
      return dir;
    });
    // The image has the user: its home is inside the machine, its own; the runner directory is its.
    for (const [i, dir] of machines.entries()) {
      const home = join(dir, REUSE_MACHINE_PATHS.runnerHome);
      expect(spawnSync('getent', ['passwd', users[i]!], { encoding: 'utf8' }).stdout).toContain(`:${home}:`);
      const uid = Number(spawnSync('id', ['-u', users[i]!], { encoding: 'utf8' }).stdout);
      expect(statSync(home).uid).toBe(uid);
      expect(statSync(join(dir, MACHINE_PATHS.runnerDir)).uid).toBe(uid);
      // The real pkill and pgrep: no session-scoped shim on a machine with a user of its own.
      expect(existsSync(join(dir, 'bin', 'pkill'))).toBe(false);
    }
    // Each machine's runner, as the boot starts it: its user, a session of its own.
    for (const user of users) {
      const r = spawn('setsid', ['runuser', '-u', user, '--', 'sleep', '300'], { detached: true, stdio: 'ignore' });
      runners.push(r);
    }
    const runnerPids = async (user: string) => {
      for (let i = 0; i < 100; i++) {
        const out = spawnSync('pgrep', ['-U', user], { encoding: 'utf8' }).stdout.trim();
        if (out) return out.split('\n').map(Number);
        await new Promise((r) => setTimeout(r, 50));
      }
      return [];
    };
    const [pidsA, pidsB] = [await runnerPids(users[0]!), await runnerPids(users[1]!)];
    expect(pidsA.length).toBeGreaterThan(0);
    expect(pidsB.length).toBeGreaterThan(0);

    // Machine a's cleaning, with its PATH (its shims first) while b's runner runs.
    const a = machines[0]!;
    const clean = spawnSync(join(a, 'clean.sh'), [], {
      encoding: 'utf8',
      env: { PATH: `${join(a, 'bin')}:${process.env.PATH}`, TMPDIR: join(a, 'tmp'), HOME: '/root', LANG: 'C.UTF-8' },
    });
    expect({ status: clean.status, log: existsSync(join(a, MACHINE_PATHS.logFile)) ? readFileSync(join(a, MACHINE_PATHS.logFile), 'utf8') : clean.stderr }).toMatchObject({ status: 0 });
    const alive = (pid: number) => spawnSync('kill', ['-0', String(pid)]).status === 0;
    expect(pidsA.filter(alive)).toEqual([]);
    expect(pidsB.filter(alive)).toEqual(pidsB);
    // The cache directory is made again, its user's.
    expect(statSync(join(a, REUSE_CACHE_DIR)).uid).toBe(statSync(join(a, REUSE_MACHINE_PATHS.runnerHome)).uid);

    for (const r of runners) if (r.pid !== undefined) for (const pid of sessionPids(r.pid)) process.kill(pid, 'SIGKILL');
    for (const u of users) removeHostUser(u);
    expect(hostUsers(prefix)).toEqual([]);
  });
});
