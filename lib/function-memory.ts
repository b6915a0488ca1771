import type { BundledHandler } from './bundled-function';

/**
 * Memory size (MB) of each of the library's functions. Lambda's CPU share follows it (1 vCPU
 * at 1769 MB, proportional below), so it sets how fast a cold start and every invocation
 * run. Chosen from the cold-start estimates in docs/performance.md; the benchmarks read it
 * from here. Internal: not part of the public API.
 */
export const FUNCTION_MEMORY_MB: Readonly<Record<BundledHandler, number>> = {
  webhook: 256,
  'scale-up': 256,
  pool: 256,
  'scale-down': 256,
};
