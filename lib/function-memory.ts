import type { BundledHandler } from './bundled-function';

/**
 * Memory size (MB) of each of the library's functions. Lambda's CPU share follows it (1 vCPU
 * at 1769 MB, proportional below), so it sets how fast a cold start and every invocation
 * run. Chosen from the cold-start estimates in docs/performance.md (`npm run
 * bench:cold-start`); the benchmarks read it from here. Internal: not part of the public API.
 *
 * - webhook and scale-up are on a job's path, and a burst starts many of their containers
 *   cold: 1024 MB keeps a cold start near half a second (webhook) and two seconds
 *   (scale-up), where 256 MB took about 2.3 s and 7 s.
 * - pool, scale-down and reconcile run on a schedule, where a cold start of about 8 s at
 *   256 MB costs no job anything; they hold about 150 MB, so 128 MB would not do.
 * - runner-release runs hourly, off every job's path.
 * - drain runs only when the fleet is deleted, as pool and scale-down do (same clients).
 */
export const FUNCTION_MEMORY_MB: Readonly<Record<BundledHandler, number>> = {
  webhook: 1024,
  'scale-up': 1024,
  pool: 256,
  'scale-down': 256,
  drain: 256,
  reconcile: 256,
  // Hourly, two HTTPS reads and an SSM write: the smallest size that holds the SDK client.
  'runner-release': 256,
  // Waits on GitHub's long poll nearly all its time; it runs all month, so its size is its
  // cost (docs/scale-set.md, "What it costs"): the smallest that holds the SDK clients.
  'scale-set-listener': 256,
  // Runs only when the stack deploys or is deleted.
  'scale-set-resource': 256,
};
