/**
 * Holds a benchmark's child processes to the CPU share a Lambda function gets: Lambda gives
 * 1 vCPU at 1769 MB and a share proportional to the memory size below that
 * (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html), so a 256 MB
 * function runs on about 0.145 of a vCPU.
 *
 * Two ways, the first that works:
 * - cgroup-v1: a child group of the cpu controller (/sys/fs/cgroup/cpu, writable as root)
 *   with a CFS quota (cpu.cfs_quota_us of every cpu.cfs_period_us), the same bandwidth
 *   control Lambda's share amounts to. The process joins the group before its first
 *   instruction (a shell writes its own pid to cgroup.procs, then execs), so everything it
 *   starts is held too. The group is removed on every path: close(), and at exit or on a
 *   signal whatever is left is moved out and the directory removed.
 * - cpulimit (Debian's, LimitCPU 2.8): stops and continues the process (and its children)
 *   to hold its average; coarser, so only a fallback.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Lambda's memory size that buys one full vCPU. */
export const MB_PER_VCPU = 1769;

/** The vCPU share of a Lambda function of `memoryMb`. */
export function vcpuShare(memoryMb: number): number {
  return memoryMb / MB_PER_VCPU;
}

export type CpuLimitMethod = 'cgroup-v1' | 'cpulimit';

export interface CpuLimit {
  readonly method: CpuLimitMethod;
  /** The share of one CPU the processes get. */
  readonly share: number;
  /** What was set, for the report: "cfs_quota_us=14472 cfs_period_us=100000" or "cpulimit -l 14". */
  readonly setting: string;
  /** Starts `command` held to the share from its start. One process (tree) per limit. */
  spawn(command: string, args: readonly string[], options: SpawnOptions): ChildProcess;
  /** Releases the limit; call after the process has ended (whatever is left is killed). */
  close(): Promise<void>;
}

const CPU_ROOT = '/sys/fs/cgroup/cpu';
const PERIOD_US = 100_000;
/** 8 times a task's default weight: enough to get a quota below one CPU beside a few busy loops. */
const SHARES = 8192;
const GROUP_PREFIX = 'cdk-warm-runners-bench-';

let serial = 0;
const open = new Set<() => void>();
let hooked = false;

/** Cleans up on exit and on the usual signals, so no group outlives the benchmark. */
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const release of [...open]) release();
  });
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) {
    process.once(signal, () => {
      for (const release of [...open]) release();
      process.exit(code);
    });
  }
}

/**
 * A CPU limit of `share` (of one CPU). `prefer` forces a method (BENCH_CPU_LIMIT=cpulimit
 * tries the fallback); otherwise cgroup-v1 when its directory is writable, else cpulimit.
 */
export function createCpuLimit(share: number, prefer = process.env.BENCH_CPU_LIMIT): CpuLimit {
  if (!(share > 0)) throw new Error(`cpu share must be above 0, got ${share}`);
  hookExit();
  const errors: string[] = [];
  if (prefer !== 'cpulimit') {
    try {
      return cgroupLimit(share);
    } catch (error) {
      errors.push(`cgroup-v1: ${(error as Error).message}`);
      if (prefer === 'cgroup-v1') throw new Error(errors.join('; '));
    }
  }
  if (spawnSync('cpulimit', ['--help'], { stdio: 'ignore' }).error === undefined) return cpulimitLimit(share);
  errors.push('cpulimit: not installed (apt-get install cpulimit)');
  throw new Error(`no way to limit the CPU here: ${errors.join('; ')}`);
}

function pidsIn(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Removes a group: kills what is left in it (only our own processes join it), moves it out, removes the directory. */
function removeGroupSync(dir: string): void {
  if (!existsSync(dir)) return;
  for (const pid of pidsIn(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
    try {
      writeFileSync(join(CPU_ROOT, 'cgroup.procs'), String(pid));
    } catch {
      // exited meanwhile
    }
  }
  rmdirSync(dir);
}

/** Groups of earlier runs of this benchmark whose process is gone (a SIGKILL skips every hook). */
function removeStaleGroups(): void {
  for (const name of readdirSync(CPU_ROOT)) {
    const m = new RegExp(`^${GROUP_PREFIX}(\\d+)-\\d+$`).exec(name);
    if (!m || existsSync(`/proc/${m[1]}`)) continue;
    try {
      removeGroupSync(join(CPU_ROOT, name));
    } catch {
      // not ours to fix: leave it
    }
  }
}

/**
 * Raises a running process's CPU weight (cgroup-v1 cpu.shares, no quota) so that a loaded
 * machine slows it less: moto plays AWS, whose answers do not slow down when this machine is
 * busy. Returns the release (also run at exit); does nothing where the cgroup is not writable.
 */
export function boostWeight(pid: number): { readonly applied: boolean; release(): void } {
  hookExit();
  const dir = join(CPU_ROOT, `${GROUP_PREFIX}${process.pid}-${++serial}`);
  try {
    removeStaleGroups();
    mkdirSync(dir);
  } catch {
    return { applied: false, release: () => {} };
  }
  const release = () => {
    open.delete(release);
    // Back to the root group first: the process itself goes on running.
    for (const p of pidsIn(dir)) {
      try {
        writeFileSync(join(CPU_ROOT, 'cgroup.procs'), String(p));
      } catch {
        // exited meanwhile
      }
    }
    try {
      rmdirSync(dir);
    } catch (error) {
      console.error(`cpu-limit: could not remove ${dir}: ${(error as Error).message}`);
    }
  };
  open.add(release);
  try {
    writeFileSync(join(dir, 'cpu.shares'), String(SHARES));
    writeFileSync(join(dir, 'cgroup.procs'), String(pid));
  } catch {
    release();
    return { applied: false, release: () => {} };
  }
  return { applied: true, release };
}

function cgroupLimit(share: number): CpuLimit {
  if (!existsSync(join(CPU_ROOT, 'cpu.cfs_quota_us'))) throw new Error(`${CPU_ROOT} is not a cgroup v1 cpu controller`);
  removeStaleGroups();
  const dir = join(CPU_ROOT, `${GROUP_PREFIX}${process.pid}-${++serial}`);
  mkdirSync(dir);
  const release = () => {
    open.delete(release);
    try {
      removeGroupSync(dir);
    } catch (error) {
      console.error(`cpu-limit: could not remove ${dir}: ${(error as Error).message}`);
    }
  };
  open.add(release);
  const quota = Math.max(1000, Math.round(share * PERIOD_US));
  try {
    writeFileSync(join(dir, 'cpu.cfs_period_us'), String(PERIOD_US));
    writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quota));
    writeFileSync(join(dir, 'cpu.shares'), String(SHARES));
  } catch (error) {
    release();
    throw error;
  }
  return {
    method: 'cgroup-v1',
    share: quota / PERIOD_US,
    setting: `cpu.cfs_quota_us=${quota} cpu.cfs_period_us=${PERIOD_US} cpu.shares=${SHARES}`,
    spawn(command, args, options) {
      // The shell joins the group, then becomes the command: no instruction runs outside it.
      return spawn('/bin/sh', ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', dir, command, ...args], options);
    },
    async close() {
      // Wait briefly for the group to empty on its own (a child that is exiting), then force it.
      for (let i = 0; i < 20 && pidsIn(dir).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
      release();
    },
  };
}

function cpulimitLimit(share: number): CpuLimit {
  const percent = Math.max(1, Math.round(share * 100));
  let limiter: ChildProcess | undefined;
  const release = () => {
    open.delete(release);
    if (limiter && limiter.exitCode === null && limiter.signalCode === null) limiter.kill('SIGTERM');
  };
  open.add(release);
  return {
    method: 'cpulimit',
    share: percent / 100,
    setting: `cpulimit --limit=${percent} --monitor-forks`,
    spawn(command, args, options) {
      const child = spawn(command, args, options);
      // Started right after the process: its first milliseconds run unheld, which only its
      // start-up (not measured) sees.
      limiter = spawn('cpulimit', [`--pid=${child.pid}`, `--limit=${percent}`, '--monitor-forks', '--lazy', '--quiet'], { stdio: 'ignore' });
      return child;
    },
    async close() {
      release();
    },
  };
}
