/**
 * How many times slower than an unloaded machine this one runs now, so that the tests' time
 * bounds scale with the machine instead of racing it. A CPU-bound probe runs until it has
 * had PROBE_CPU_MS of CPU; the wall time that took over the CPU time it got is 1 when
 * nothing competes for the cores and about (runnable processes / cores) when something
 * does (other builds, a CPU hog). The highest of three rounds counts.
 *
 * Measured where it is used, once per module instance (vitest imports this anew for each
 * test file), because a suite's load changes while it runs: the figure a file's bounds scale
 * with is the larger of the one measured now and the one measured before (CWR_SLOWDOWN_SEEN,
 * which vitest's config sets at the start and which later measurements raise, so child
 * processes, such as `npm run local` started by a test, never go below their parent's).
 * Set CWR_SLOWDOWN yourself to force a figure: it is used as it is, nothing is measured.
 *
 * A slow CPU that nothing else uses reads 1: the bounds this scales carry their own margin
 * for that. Run directly (`node --import tsx test/support/slowdown.ts`) it prints the figure.
 */
import { createHash } from 'node:crypto';

/** A figure forced by the user: used as it is. */
export const SLOWDOWN_ENV = 'CWR_SLOWDOWN';
/** The highest figure measured so far in this process tree: a floor for later measurements. */
export const SLOWDOWN_SEEN_ENV = 'CWR_SLOWDOWN_SEEN';
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

let figure: number | undefined;

/** The figure for this module instance: forced through CWR_SLOWDOWN, or measured now (at least the highest seen before). */
export function slowdown(): number {
  const given = process.env[SLOWDOWN_ENV];
  if (given) {
    const forced = Number(given);
    if (!(Number.isFinite(forced) && forced >= 1)) throw new Error(`${SLOWDOWN_ENV} must be a number of at least 1 (got "${given}"); unset it to have it measured`);
    return forced;
  }
  if (figure === undefined) {
    const seen = Number(process.env[SLOWDOWN_SEEN_ENV]);
    figure = Math.max(Number.isFinite(seen) ? seen : 1, measureSlowdown());
    process.env[SLOWDOWN_SEEN_ENV] = String(figure);
  }
  return figure;
}

/** `ms` (a bound tuned on an unloaded machine) scaled by the slowdown. */
export function scaled(ms: number): number {
  return Math.ceil(ms * slowdown());
}

// Run directly: print the figure (the bats harness and vitest's config read it).
if (require.main === module) console.log(slowdown());
