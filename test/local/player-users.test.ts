import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Provider } from '../../lambdas/shared/contract';
import { ReuseScope } from '../../lambdas/shared/contract/reuse';
import { MACHINE_PATHS, relocateUserData, renderLocalUserData, REUSE_MACHINE_PATHS, TEMPLATE_ROOT } from '../../local/instances/launch-templates';
import { createMachine, DEFAULT_RUNNER_DIR, sessionPids } from '../../local/instances/machine';
import {
  canCreateUsers,
  createHostUser,
  hostUserExists,
  hostUsers,
  playedUserName,
  playedUserPrefix,
  reapStrandedPlayedUsers,
  removeHostUser,
  runPidFile,
  RUNNER_USER_PLACEHOLDER,
  sandboxRunAlive,
  strandedPlayedUsers,
} from '../../local/instances/runner-users';
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
      // The real pkill: no session-scoped shim on a machine with a user of its own.
      expect(existsSync(join(dir, 'bin', 'pkill'))).toBe(false);
    }
    // Each machine's runner, as the boot starts it: its user, a session of its own.
    for (const user of users) {
      const r = spawn('setsid', ['runuser', '-u', user, '--', 'sleep', '300'], { detached: true, stdio: 'ignore' });
      runners.push(r);
    }
    // The runner itself (its `sleep`), not whatever else runs as the user for a moment; waited
    // for generously: starting a process takes long on a loaded machine.
    const runnerPids = async (user: string) => {
      for (let i = 0; i < 1200; i++) {
        const out = spawnSync('pgrep', ['-U', user, '-x', 'sleep'], { encoding: 'utf8' }).stdout.trim();
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

/**
 * A run killed outright (SIGKILL) removes none of its machines' users; the next run reaps them
 * (`strandedPlayedUsers`), and nothing else of this host.
 */
describe('runner users that earlier runs left', () => {
  const sandbox = '/tmp/cwr-local-AbC123';
  const id = '0123456789abcdef0';
  const user = `cwra1b2c3-${id}`;
  const home = `${sandbox}/i-${id}/home/runner`;
  const gone = (path: string) => path !== `${sandbox}/i-${id}`;
  const there = () => true;
  const alive = () => true;

  it.each<[string, string, string, (p: string) => boolean, (r: string) => boolean, string[]]>([
    ['its machine directory gone', user, home, gone, alive, [user]],
    ['its machine there, its run over', user, home, there, () => false, [user]],
    ['its machine there and its run going (another run at the same time)', user, home, there, alive, []],
    ['a name of another shape (the bats suites\' users)', 'cwr-reuse', home, gone, alive, []],
    ['a stock suite user', 'cwr-stock-4242', home, gone, alive, []],
    ['a run tag that is not 6 hex digits', `cwrA1B2C3-${id}`, home, gone, alive, []],
    ['a name with more after the instance', `${user}x`, home, gone, alive, []],
    ['a home of another instance than the name\'s', user, `${sandbox}/i-0123456789abcdef1/home/runner`, () => false, alive, []],
    ['a home outside a local sandbox', user, `/home/${user}`, () => false, alive, []],
    ['a home in a sandbox of another name', user, `/tmp/cwr-users-x/i-${id}/home/runner`, () => false, alive, []],
    ['a home not the machine\'s home/runner', user, `${sandbox}/i-${id}/home/other`, () => false, alive, []],
    ['a relative home', user, `tmp/cwr-local-x/i-${id}/home/runner`, () => false, alive, []],
  ])('%s', (_why, name, homeDir, exists, runAlive, expected) => {
    const others = [
      { name: 'root', home: '/root' },
      { name: 'runner', home: '/home/runner' },
    ];
    expect(strandedPlayedUsers([...others, { name, home: homeDir }], exists, runAlive)).toEqual(expected);
  });

  it("never this run's own users", () => {
    expect(strandedPlayedUsers([{ name: user, home }], () => false, () => false, 'cwra1b2c3-')).toEqual([]);
    expect(strandedPlayedUsers([{ name: user, home }], () => false, () => false, 'cwrd4e5f6-')).toEqual([user]);
  });

  it("a sandbox's run is going while its run.pid names a live process, or it has none", () => {
    const root = mkdtempSync(join(tmpdir(), 'cwr-local-'));
    try {
      expect(sandboxRunAlive(root)).toBe(true);
      writeFileSync(runPidFile(root), `${process.pid}\n`);
      expect(sandboxRunAlive(root)).toBe(true);
      const ended = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
      writeFileSync(runPidFile(root), `${ended.stdout}\n`);
      expect(sandboxRunAlive(root)).toBe(false);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it.runIf(canCreateUsers())('the next run removes (root: a real user of this host) a user whose machine is gone, not one whose run goes on', () => {
    const root = mkdtempSync(join(tmpdir(), 'cwr-local-'));
    const prefix = playedUserPrefix();
    const [stranded, kept] = ['i-0000000000000000c', 'i-0000000000000000d'].map((i) => playedUserName(prefix, i)) as [string, string];
    try {
      writeFileSync(runPidFile(root), `${process.pid}\n`);
      createHostUser(stranded, join(root, 'i-0000000000000000c', REUSE_MACHINE_PATHS.runnerHome));
      createHostUser(kept, join(root, 'i-0000000000000000d', REUSE_MACHINE_PATHS.runnerHome));
      rmSync(join(root, 'i-0000000000000000c'), { recursive: true, force: true });
      const reaped = reapStrandedPlayedUsers();
      expect(reaped.removed).toContain(stranded);
      expect(reaped.removed).not.toContain(kept);
      expect(hostUserExists(stranded)).toBe(false);
      expect(hostUserExists(kept)).toBe(true);
    } finally {
      for (const u of [stranded, kept]) removeHostUser(u);
      rmSync(root, { recursive: true, force: true });
    }
  });
});
