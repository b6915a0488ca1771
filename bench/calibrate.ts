/**
 * A fixed amount of CPU-bound work, timed: the same loop inside and outside a CPU limit gives
 * the slowdown the limit really imposed (on a loaded machine the unlimited run is slowed too,
 * so the benchmarks report both the ratio and the CPU share the limited loop obtained).
 */
export interface Calibration {
  /** Wall time of the loop. */
  readonly wallMs: number;
  /** CPU time the process spent meanwhile (user + system). */
  readonly cpuMs: number;
}

/** Iterations of the loop: about a quarter of a second of CPU on the development machine (several CFS periods held, so the quota, not the period boundaries, sets the result). */
export const CALIBRATION_ITERATIONS = 180_000_000;

export function calibrate(iterations = CALIBRATION_ITERATIONS): Calibration & { readonly checksum: number } {
  const cpu = process.cpuUsage();
  const start = performance.now();
  // An LCG the JIT cannot fold away: the result is returned.
  let x = 1;
  for (let i = 0; i < iterations; i++) x = (Math.imul(x, 1103515245) + 12345) >>> 0;
  const wallMs = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { wallMs, cpuMs: (used.user + used.system) / 1000, checksum: x };
}

export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}
