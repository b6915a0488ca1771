import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { scaled } from '../support/slowdown';

/**
 * Ctrl-C of `npm run local` as a terminal sends it: SIGINT to the whole process group. The
 * command runs in a process group of its own (as a shell job would) with TMPDIR pointing at a
 * directory of this test, so its sandbox directories are the only cwr-local-* there.
 */
const root = join(__dirname, '..', '..');

function children(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // "pid (comm) state ppid ...": comm may hold spaces, so read after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out.flatMap((c) => [c, ...children(c)]);
}

const cmdline = (pid: number): string => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
};
const alive = (pid: number): boolean => {
  try {
    return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

/** The live ones among pids, after giving a SIGKILL sent at the parent's exit a moment to land (a safety bound). */
async function stillAlive(pids: number[]): Promise<number[]> {
  const deadline = Date.now() + scaled(5_000);
  while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  return pids.filter(alive);
}

let tmp: string | undefined;
afterEach(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
  tmp = undefined;
});

async function interrupt(signals: number): Promise<{ code: number | null; stdout: string; stderr: string; motoPids: number[]; tmp: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'cwr-interrupt-'));
  tmp = dir;
  // As package.json's `local` script runs it (node --import tsx, not the tsx CLI: see bin/local.ts).
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'bin', 'local.ts'), '--jobs', '1', '--pool-size', '1', '--verbose'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group, like a shell job
    env: { ...process.env, TMPDIR: dir },
  });
  let stdout = '';
  let stderr = '';
  let motoPids: number[] = [];
  let sent = 0;
  const send = () => {
    sent += 1;
    process.kill(-child.pid!, 'SIGINT');
  };
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
    // Once a machine boots, everything (moto, the player, the Lambdas) is running.
    if (sent === 0 && /\sboot\s/.test(stderr)) {
      motoPids = children(child.pid!).filter((p) => /moto[._]server/.test(cmdline(p)));
      send();
    }
    if (sent === 1 && signals > 1 && stderr.includes('stopping:')) send();
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (c) => resolve(c));
  });
  return { code, stdout, stderr, motoPids, tmp: dir };
}

describe('npm run local interrupted (SIGINT to its process group)', () => {
  it('stops what it started, prints the report and exits 130', { timeout: scaled(120_000) }, async () => {
    const r = await interrupt(1);
    expect(r.code, r.stderr.slice(-3000)).toBe(130);
    expect(r.stdout).toContain('interrupted');
    expect(r.stderr).not.toContain('ECONNREFUSED');
    expect(r.motoPids).toHaveLength(1);
    expect(await stillAlive(r.motoPids)).toEqual([]);
    expect(readdirSync(r.tmp).filter((f) => f.startsWith('cwr-local-'))).toEqual([]);
  });

  it('a second SIGINT exits at once and still leaves no moto and no sandbox behind', { timeout: scaled(120_000) }, async () => {
    const r = await interrupt(2);
    expect(r.code, r.stderr.slice(-3000)).toBe(130);
    expect(r.motoPids).toHaveLength(1);
    expect(await stillAlive(r.motoPids)).toEqual([]);
    expect(readdirSync(r.tmp).filter((f) => f.startsWith('cwr-local-'))).toEqual([]);
  });
});
