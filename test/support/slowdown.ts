/**
 * How many times slower than an unloaded machine this one runs now, so that the tests' time
 * bounds scale with the machine instead of racing it. A CPU-bound probe runs until it has
 * had PROBE_CPU_MS of CPU; the wall time that took over the CPU time it got is 1 when
 * nothing competes for the cores and about (runnable processes / cores) when something
 * does (other builds, a CPU hog). The highest of three rounds counts.
 *
 * Measured once per process tree: the first call stores the figure in CWR_SLOWDOWN, which
 * child processes (vitest's workers, `npm run local` started by a test, the bats harness's
 * renderer) inherit instead of measuring again. Set CWR_SLOWDOWN yourself to force a figure.
 *
 * A slow CPU that nothing else uses reads 1: the bounds this scales carry their own margin
 * for that. Run directly (`node --import tsx test/support/slowdown.ts`) it prints the figure.
 */
import { createHash } from 'node:crypto';

export const SLOWDOWN_ENV = 'CWR_SLOWDOWN';
const PROBE_CPU_MS = 100;
const ROUNDS = 3;
/** A reading beyond this is a broken measurement, not a machine a test suite can run on. */
const MAX_SLOWDOWN = 30;

function probeRound(): number {
  const block = Buffer.alloc(64 * 1024, 7);
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  for (;;) {
    for (let i = 0; i < 20; i++) createHash('sha256').update(block).digest();
    const used = process.cpuUsage(cpu0);
    const cpuMs = (used.user + used.system) / 1000;
    if (cpuMs >= PROBE_CPU_MS) return (performance.now() - wall0) / cpuMs;
  }
}

/** A fresh measurement (rounded to a tenth, at least 1). */
export function measureSlowdown(): number {
  let worst = 1;
  for (let i = 0; i < ROUNDS; i++) worst = Math.max(worst, probeRound());
  return Math.min(MAX_SLOWDOWN, Math.ceil(worst * 10) / 10);
}

/** The figure for this run: inherited through CWR_SLOWDOWN, or measured now and stored there. */
export function slowdown(): number {
  const inherited = Number(process.env[SLOWDOWN_ENV]);
  if (Number.isFinite(inherited) && inherited >= 1) return inherited;
  const measured = measureSlowdown();
  process.env[SLOWDOWN_ENV] = String(measured);
  return measured;
}

/** `ms` (a bound tuned on an unloaded machine) scaled by the slowdown. */
export function scaled(ms: number): number {
  return Math.ceil(ms * slowdown());
}

// Run directly: print the figure (the bats harness and vitest's config read it).
if (require.main === module) console.log(slowdown());
