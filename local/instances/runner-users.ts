/**
 * Each played instance's own runner user. On EC2 every instance is a machine of its own, so
 * its runner user's processes are its alone: the reusable pool's cleaning ends them all
 * (`pkill -KILL -U <uid>`, then `ps -U <uid>` to see none is left). Played instances share
 * this host, so one shared runner user would let one machine's cleaning see, and kill, another
 * machine's runner. So the templates name a placeholder user and each machine's relocation
 * (launch-templates.ts `relocateUserData`) names a real user of this host made for it: created
 * by the image on a prebuilt one, by the install step's `useradd` on a stock one (the
 * `user-shims/useradd` shim runs the real useradd, with the machine's home), and removed when
 * the player stops; a run killed outright removes none, and the next run reaps them
 * (`reapStrandedPlayedUsers`). Creating users needs root; otherwise the machines share the
 * current user, and the session-scoped pkill shim (shims/) only keeps a machine's cleaning
 * from ending the others' runners: its `ps -U` still sees them, so `--reuse` needs root
 * (cli-args.ts refuses it otherwise).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The runner user the templates render (a valid name the renderer accepts); each machine's relocation replaces it. */
export const RUNNER_USER_PLACEHOLDER = 'cwr-played-runner';

/** Where useradd and userdel of the played users take turns (each refuses a locked /etc/passwd instead of waiting). */
export const USERS_LOCK = join(existsSync('/run/lock') ? '/run/lock' : tmpdir(), 'cwr-local-users.lock');

/** Linux user names: at most 32 characters (useradd's default NAME_REGEX). */
const USER_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/**
 * A run's user name prefix: `cwr<6 hex>-`, random, so that runs at the same time (another
 * worktree's, a test's) never share a user, and the leftovers check lists this run's alone.
 */
export function playedUserPrefix(tag = randomBytes(3).toString('hex')): string {
  return `cwr${tag}-`;
}

/** The user of instance `i-<hex>` in the run of `prefix` (27 characters with moto's 17-hex ids). */
export function playedUserName(prefix: string, instanceId: string): string {
  const name = `${prefix}${instanceId.replace(/^i-/, '')}`;
  if (!USER_NAME.test(name)) throw new Error(`"${name}" (instance ${instanceId}) is no Linux user name of at most 32 characters`);
  return name;
}

/** Whether this process may make the machines' users (root); otherwise they share one. */
export function canCreateUsers(): boolean {
  return process.getuid?.() === 0;
}

/**
 * The user as an image that has it: its own group, bash, its home inside the machine (created,
 * from /etc/skel). The same call the useradd shim makes for a stock image's install step.
 */
export function createHostUser(name: string, home: string): void {
  execFileSync('flock', ['-w', '60', USERS_LOCK, 'useradd', '--create-home', '--home-dir', home, '--user-group', '--shell', '/bin/bash', name], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Whether the user exists on this host. */
export function hostUserExists(name: string): boolean {
  return hostUsers(name).includes(name);
}

/**
 * Removes the user (and its group) from this host, first ending any process of it that
 * outlived its machine's sessions. Its home is in the machine's directory, which the sandbox
 * removal takes. A user that does not exist (a stock machine that never installed) is no error.
 */
export function removeHostUser(name: string): void {
  if (!hostUserExists(name)) return;
  // Until none is left (a process forked during pkill's scan of /proc survives it; a killed one
  // takes a moment to exit), as the boot script's cleaning does, pausing between rounds: a
  // process left with the freed uid would belong to the next user. About 5 s at most.
  for (let round = 0; round < 50 && userProcesses(name); round++) {
    if (round > 0) execFileSync('sleep', ['0.1']);
    try {
      execFileSync('pkill', ['-KILL', '-U', name], { stdio: 'ignore' });
    } catch {
      // status 1: no process
    }
  }
  execFileSync('flock', ['-w', '60', USERS_LOCK, 'userdel', name], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Whether the user has a live process (zombies do not count: they hold no uid for long). */
function userProcesses(name: string): boolean {
  try {
    const out = execFileSync('ps', ['-U', name, '-o', 'stat='], { encoding: 'utf8' });
    return out.split('\n').some((stat) => stat.trim() !== '' && !stat.trim().startsWith('Z'));
  } catch {
    return false; // status 1: no process
  }
}

/** This host's users whose names start with `prefix`, from the user database. */
export function hostUsers(prefix: string): string[] {
  const passwd = execFileSync('getent', ['passwd'], { encoding: 'utf8' });
  return passwd
    .split('\n')
    .map((line) => line.split(':')[0] ?? '')
    .filter((name) => name !== '' && name.startsWith(prefix));
}

/** A user of this host as the user database names it: its name and home. */
export interface HostUser {
  readonly name: string;
  readonly home: string;
}

/** This host's users with their homes, from the user database. */
export function hostUsersWithHomes(): HostUser[] {
  const passwd = execFileSync('getent', ['passwd'], { encoding: 'utf8' });
  return passwd
    .split('\n')
    .map((line) => line.split(':'))
    .filter((f) => f.length >= 7 && f[0] !== '')
    .map((f) => ({ name: f[0]!, home: f[5]! }));
}

/** The file in a run's sandbox that names the process of the run (`markRun`). */
export const RUN_PID_FILE = 'run.pid';

/** Names this process as the run of the sandbox `sandboxRoot`, for a later run's `strandedPlayedUsers`. */
export function runPidFile(sandboxRoot: string): string {
  return join(sandboxRoot, RUN_PID_FILE);
}

/** A played user's name (`playedUserName`): the run's tag, then the instance id's hex. */
const PLAYED_USER = /^cwr[0-9a-f]{6}-([0-9a-f]{8,17})$/;
/** Its home: `home/runner` in its machine (`<sandbox>/<instance id>`) of a run's sandbox (`<tmp>/cwr-local-*`). */
const PLAYED_HOME = /^(\/(?:[^/]+\/)*cwr-local-[^/]+)\/(i-([0-9a-f]{8,17}))\/home\/runner$/;

/**
 * The played runner users that an earlier run left on this host and no run will remove: a
 * run killed outright (SIGKILL, a crash of node) removes none of its users. A user is one
 * only when every sign agrees, so that no other user of this host (nor a user of a run still
 * going, another worktree's or a test's) is ever touched: its name has `playedUserName`'s
 * shape and its run is not `ownPrefix`; its home is `home/runner` in the machine directory
 * of that same instance in a local sandbox; and that machine directory is gone, or the
 * sandbox's run is over (its `run.pid` names no live process: `runAlive`). A sandbox without
 * a `run.pid` (a run of an older tree) counts as running.
 */
export function strandedPlayedUsers(
  users: readonly HostUser[],
  exists: (path: string) => boolean,
  runAlive: (sandboxRoot: string) => boolean,
  ownPrefix?: string,
): string[] {
  return users
    .filter((u) => {
      const name = PLAYED_USER.exec(u.name);
      const home = PLAYED_HOME.exec(u.home);
      if (!name || !home || name[1] !== home[3]) return false;
      if (ownPrefix !== undefined && u.name.startsWith(ownPrefix)) return false;
      return !exists(join(home[1]!, home[2]!)) || !runAlive(home[1]!);
    })
    .map((u) => u.name);
}

/** Whether the run of that sandbox may still be going: its `run.pid` is missing or names a live process. */
export function sandboxRunAlive(sandboxRoot: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(runPidFile(sandboxRoot), 'utf8').trim());
  } catch {
    return true;
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: a process of another user has it; only ESRCH says none does.
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * Removes the played runner users earlier runs left (`strandedPlayedUsers`), before this
 * run makes its own. Returns those removed and those that could not be.
 */
export function reapStrandedPlayedUsers(ownPrefix?: string): { removed: string[]; failed: string[] } {
  const removed: string[] = [];
  const failed: string[] = [];
  for (const name of strandedPlayedUsers(hostUsersWithHomes(), existsSync, sandboxRunAlive, ownPrefix)) {
    try {
      removeHostUser(name);
      removed.push(name);
    } catch {
      failed.push(name);
    }
  }
  return { removed, failed };
}
