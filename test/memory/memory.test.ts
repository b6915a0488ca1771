import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { scaled } from '../support/slowdown';

const run = promisify(execFile);

/** Runs serve-jobs.ts in a child with --expose-gc (vitest's workers cannot force GC). */
async function serve(leaky: boolean): Promise<{ bytesPerJob: number; heaps: Record<string, number> }> {
  const args = ['--expose-gc', '--import', 'tsx', 'test/memory/serve-jobs.ts', ...(leaky ? ['--leaky'] : [])];
  const { stdout } = await run(process.execPath, args, { cwd: process.cwd(), maxBuffer: 1 << 20 });
  const last = stdout.trim().split('\n').pop()!;
  return JSON.parse(last) as { bytesPerJob: number; heaps: Record<string, number> };
}

const LIMIT = 100;

describe('scale-up memory per job (one warm container, 1,000 → 5,000 → 10,000 jobs)', () => {
  it(`retains less than ${LIMIT} bytes per job after forced GC`, { timeout: scaled(60_000) }, async () => {
    const r = await serve(false);
    expect(Object.keys(r.heaps)).toEqual(['1000', '5000', '10000']);
    expect(r.bytesPerJob).toBeLessThan(LIMIT);
  });

  it('the same check fails a handler that keeps every job it saw', { timeout: scaled(60_000) }, async () => {
    const r = await serve(true);
    expect(r.bytesPerJob).toBeGreaterThanOrEqual(LIMIT);
  });
});
