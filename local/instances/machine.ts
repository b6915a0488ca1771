/**
 * A played instance's machine: a directory laid out like the host paths the local user data
 * uses (launch-templates.ts `MACHINE_PATHS`), the shims for what only a real machine has
 * (power-off, systemd, docker, and for the install step dnf (not on an apt image), useradd, usermod, getent), the runner binaries
 * on a prebuilt image or none on a stock one, and its processes, which are one session.
 */
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { shellQuote } from '../../lib/user-data';
import { MACHINE_PATHS, REUSE_MACHINE_PATHS } from './launch-templates';
import { createHostUser, USERS_LOCK } from './runner-users';

export const SHIMS_DIR = join(__dirname, 'shims');
/**
 * The install step's shims, shared with the boot sandbox of the bats harness: dnf cannot run
 * on this host, and on a stock image the runner user exists only once useradd ran (getent).
 */
export const INSTALL_SHIMS_DIR = join(__dirname, '..', '..', 'test', 'templates', 'shims', 'bin');
const INSTALL_SHIMS = ['dnf', 'getent', 'useradd', 'usermod'] as const;
/** A machine with a user of its own: its install step's useradd makes that real user (runner-users.ts). */
export const USER_SHIMS_DIR = join(__dirname, 'user-shims');
/** The shim that keeps one machine's cleaning from ending the runners of machines that share its runner user (shims/): with a user of its own, the real command. */
const SHARED_USER_SHIMS = new Set(['pkill']);
/** The fake runner binaries (H-CI's local/runner/: run.sh, gitlab-runner). */
export const DEFAULT_RUNNER_DIR = join(__dirname, '..', 'runner');

export interface MachineOptions {
  readonly dir: string;
  readonly instanceId: string;
  /** The real aws CLI; linked as `aws` into the machine's bin directory. */
  readonly awsCli: string;
  /** Directory whose files are the runner binaries, in place at boot (a prebuilt image). */
  readonly runnerSource?: string;
  /**
   * A stock image instead: no runner in place, and this runner user unknown until the install
   * step creates it (the getent and useradd shims). Mutually exclusive with `runnerSource`.
   */
  readonly stockRunnerUser?: string;
  /** Extra environment for the runners (they start with `env -i`, so wrappers set it). */
  readonly runnerEnv?: Readonly<Record<string, string>>;
  /**
   * The user who owns the runner user's home (`REUSE_MACHINE_PATHS.runnerHome`), created for a
   * reusable pool's machine (the cleaning keeps or empties it). @default - no home is created
   */
  readonly homeOwner?: string;
  /**
   * The machine's own runner user, a real user of this host (runner-users.ts), its home
   * `REUSE_MACHINE_PATHS.runnerHome` inside the machine: on a prebuilt image created here (the
   * image has it) and the runner directory is its; on a stock one (`stockRunnerUser` is then
   * this name) created by the install step's useradd (the user-shims/ shim runs the real one).
   * The real pkill and ps then end and see this machine's runner alone. `homeOwner` is unused.
   * @default - the machines share the host's runner user (stockRunnerUser, or the rendered one)
   */
  readonly playedUser?: string;
  /**
   * The run's own Docker daemon (`unix://...`, local/docker-daemon.ts): the machine's docker
   * shim talks to it (calls/docker-host). @default - no daemon: the shim answers as none would
   */
  readonly dockerHost?: string;
  /**
   * An Ubuntu-style image (an apt pool's): no dnf shim, so the install step runs this host's
   * real apt-get (root: it installs the runner's OS packages on this host, a no-op for those
   * already there). @default false: the dnf shim stands in for Amazon Linux's dnf
   */
  readonly apt?: boolean;
}

export interface Machine {
  readonly dir: string;
  /** First on the boot's PATH: the shims and `aws`. */
  readonly binDir: string;
  readonly unitDir: string;
  /** The user data as cloud-init saves it before running it. */
  readonly userDataFile: string;
  /** What the boots print (cloud-init-output.log and the journal in one). */
  readonly consoleLog: string;
  readonly stallMarker: string;
  /** Where the install shims record their calls (the boot's SHIM_CALLS). */
  readonly callsDir: string;
}

export function machineAt(dir: string): Machine {
  return {
    dir,
    binDir: join(dir, 'bin'),
    unitDir: join(dir, MACHINE_PATHS.unitDir),
    userDataFile: join(dir, 'var/lib/cloud/instance/user-data.txt'),
    consoleLog: join(dir, 'var/log/console.log'),
    stallMarker: join(dir, MACHINE_PATHS.stallMarker),
    callsDir: join(dir, 'calls'),
  };
}

/**
 * The real aws CLI (test/templates/helpers.bash resolve_aws_cli): behind pyenv, `aws` is a
 * shim that needs pyenv's environment, so the real executable is resolved through pyenv.
 */
export function resolveAwsCli(): string {
  const run = (script: string): string => execFileSync('bash', ['-c', script], { encoding: 'utf8' }).trim();
  let path: string;
  try {
    path = run('command -v aws');
  } catch {
    throw new Error('the aws CLI is missing (pip install awscli)');
  }
  if (path.endsWith('/shims/aws')) {
    try {
      path = run('pyenv which aws');
    } catch {
      // no pyenv: the shim is all there is
    }
  }
  return path;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Lays out a fresh machine. Everything is world-readable: the runner runs as an unprivileged
 * user (nobody when the player runs as root) and must reach its binaries.
 */
export function createMachine(o: MachineOptions): Machine {
  const m = machineAt(o.dir);
  const stock = o.stockRunnerUser !== undefined;
  if (stock === (o.runnerSource !== undefined)) {
    throw new Error('a machine is either prebuilt (runnerSource: its runner binaries) or stock (stockRunnerUser), not both or neither');
  }
  if (o.runnerSource !== undefined && (!existsSync(o.runnerSource) || !statSync(o.runnerSource).isDirectory())) {
    throw new Error(`no runner binaries at ${o.runnerSource}: give InstancePlayerOptions.runnerDir a directory holding run.sh and gitlab-runner`);
  }
  if (o.playedUser !== undefined && stock && o.stockRunnerUser !== o.playedUser) {
    throw new Error(`a stock machine with a user of its own installs that user: stockRunnerUser "${o.stockRunnerUser}" is not "${o.playedUser}"`);
  }
  for (const name of Object.keys(o.runnerEnv ?? {})) {
    if (!ENV_NAME.test(name)) throw new Error(`runnerEnv name "${name}" is not a shell variable name`);
  }
  // A stock image has no runner directory: the install step creates it.
  const dirs = ['bin', 'tmp', 'aws', 'dev', 'sys', 'calls', 'var/lib/cloud/instance', 'var/log', MACHINE_PATHS.unitDir, ...(stock ? [] : ['runner-bin', MACHINE_PATHS.runnerDir])];
  for (const sub of dirs) {
    mkdirSync(join(o.dir, sub), { recursive: true, mode: 0o755 });
  }
  chmodSync(o.dir, 0o755);
  // The temp directories as on a real host: every user may write, only the owner delete.
  for (const tmp of [REUSE_MACHINE_PATHS.tmpDir, REUSE_MACHINE_PATHS.varTmpDir, REUSE_MACHINE_PATHS.shmDir]) {
    mkdirSync(join(o.dir, tmp), { recursive: true });
    chmodSync(join(o.dir, tmp), 0o1777);
  }
  const home = join(o.dir, REUSE_MACHINE_PATHS.runnerHome);
  if (o.playedUser !== undefined) {
    // useradd creates the home itself, below a parent as on a real host.
    mkdirSync(join(home, '..'), { recursive: true, mode: 0o755 });
  } else if (o.homeOwner !== undefined) {
    mkdirSync(home, { recursive: true, mode: 0o755 });
    execFileSync('chown', [o.homeOwner, home]);
  }
  const own = o.playedUser !== undefined;
  const shims: [string, readonly string[]][] = [
    [SHIMS_DIR, readdirSync(SHIMS_DIR).filter((n) => !own || !SHARED_USER_SHIMS.has(n))],
    [INSTALL_SHIMS_DIR, INSTALL_SHIMS.filter((n) => (!own || n !== 'useradd') && (!o.apt || n !== 'dnf'))],
    ...(own ? [[USER_SHIMS_DIR, ['useradd']] as [string, readonly string[]]] : []),
  ];
  for (const [from, names] of shims) {
    for (const shim of names) {
      copyFileSync(join(from, shim), join(m.binDir, shim));
      chmodSync(join(m.binDir, shim), 0o755);
    }
  }
  // Its own user does not exist until created: the getent shim needs no hiding then.
  if (stock && !own) writeFileSync(join(m.callsDir, 'stock-user'), `${o.stockRunnerUser}\n`);
  if (own) writeFileSync(join(m.callsDir, 'played-user'), `${o.playedUser}\n${home}\n${USERS_LOCK}\n`);
  // Read by the docker shim, also as the runner user (the job's docker CLI).
  if (o.dockerHost !== undefined) writeFileSync(join(m.callsDir, 'docker-host'), `${o.dockerHost}\n`, { mode: 0o644 });
  symlinkSync(o.awsCli, join(m.binDir, 'aws'));
  // No credentials or config of the host's: the CLI must take its credentials from IMDS.
  writeFileSync(join(o.dir, 'aws/config'), '');
  writeFileSync(join(o.dir, 'aws/credentials'), '');
  writeFileSync(join(o.dir, MACHINE_PATHS.machineIdFile), '0123456789abcdef0123456789abcdef\n');
  // What PRIME reads through once, in place of the root volume.
  writeFileSync(join(o.dir, MACHINE_PATHS.preReadDevice), Buffer.alloc(64 * 1024));
  // On Nitro the instance id is in DMI; the boot script reads it there on later boots.
  writeFileSync(join(o.dir, MACHINE_PATHS.dmiAssetTagFile), `${o.instanceId}\n`);
  if (o.runnerSource === undefined) return m;
  // The binaries go to runner-bin/; runner/ gets a wrapper of the same name that sets
  // runnerEnv (the boot starts the runner with `env -i`) and runs the binary.
  const runnerSource = o.runnerSource;
  const exports = Object.entries(o.runnerEnv ?? {})
    .map(([k, v]) => `export ${k}=${shellQuote(v)}\n`)
    .join('');
  for (const name of readdirSync(runnerSource).filter((n) => statSync(join(runnerSource, n)).isFile())) {
    const binary = join(o.dir, 'runner-bin', name);
    copyFileSync(join(runnerSource, name), binary);
    chmodSync(binary, 0o755);
    const wrapper = join(o.dir, MACHINE_PATHS.runnerDir, name);
    writeFileSync(wrapper, `#!/bin/bash\n# The local sandbox's runner settings, then the runner binary.\n${exports}exec ${shellQuote(binary)} "$@"\n`);
    chmodSync(wrapper, 0o755);
  }
  if (o.playedUser !== undefined) createHostUser(o.playedUser, home);
  // The runner user creates its workspace there (_work), as in an image that installed the runner for it.
  const runnerOwner = o.playedUser ?? o.homeOwner;
  if (runnerOwner !== undefined) execFileSync('chown', [runnerOwner, join(o.dir, MACHINE_PATHS.runnerDir)]);
  return m;
}

/**
 * The units enabled in the machine's unit directory, each with its ExecStart: what systemd
 * would start at boot (multi-user.target.wants, as the systemctl shim links them).
 */
export function enabledUnits(m: Machine): { name: string; execStart: string }[] {
  const wants = join(m.unitDir, 'multi-user.target.wants');
  if (!existsSync(wants)) return [];
  return readdirSync(wants)
    .filter((name) => name.endsWith('.service') && existsSync(join(wants, name)))
    .sort()
    .flatMap((name) => {
      const execStart = /^ExecStart=(\S+)\s*$/m.exec(readFileSync(join(wants, name), 'utf8'))?.[1];
      return execStart ? [{ name, execStart }] : [];
    });
}

/** Live (not zombie) processes of a session, read from /proc (Linux). */
export function sessionPids(sid: number): number[] {
  return liveProcesses(3, sid);
}

/** Live (not zombie) processes of a process group, read from /proc (Linux). */
export function groupPids(pgid: number): number[] {
  return liveProcesses(2, pgid);
}

/** `field`: index after the state in /proc/<pid>/stat (2 process group, 3 session). */
function liveProcesses(field: 2 | 3, id: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] !== 'Z' && Number(fields[field]) === id) pids.push(Number(entry));
  }
  return pids;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Ends every process of a session, as a power-off does: SIGTERM, then SIGKILL for what is
 * left after `graceMs`. Session, not process group: `timeout` (the boot script bounds calls
 * with it) moves itself into a process group of its own, but stays in the session.
 */
export async function killSession(sid: number, graceMs = 1_000): Promise<void> {
  const signal = (sig: NodeJS.Signals): void => {
    for (const pid of sessionPids(sid)) {
      try {
        process.kill(pid, sig);
      } catch {
        // exited meanwhile
      }
    }
  };
  signal('SIGTERM');
  for (let waited = 0; waited < graceMs && sessionPids(sid).length > 0; waited += 50) await sleep(50);
  for (let round = 0; round < 100 && sessionPids(sid).length > 0; round++) {
    signal('SIGKILL');
    await sleep(50);
  }
  const left = sessionPids(sid);
  if (left.length > 0) throw new Error(`processes ${left.join(', ')} of session ${sid} survived SIGKILL`);
}
