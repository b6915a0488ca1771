import type { Logger } from '../shared/log';
import { RateReserveReached } from './rate-budget';

/** Thrown to end a run before its Lambda's timeout would end it, losing what it had not queued. */
export class DeadlineReached extends Error {
  constructor() {
    super('the reconciler reached its deadline');
    this.name = 'DeadlineReached';
  }
}

/** A deadline or a rate-limit reserve: the run ends, the next run goes on. */
export const isStop = (error: unknown): boolean => error instanceof RateReserveReached || error instanceof DeadlineReached;

/**
 * Runs a provider's reconcile steps in order. Each step's unexpected failure is logged and
 * counted, and the run goes on to the next step and to its metrics; a stop (deadline,
 * reserve) ends the run. Returns what stopped it: 'deadline', the credential at its reserve,
 * or undefined.
 */
export async function runSteps(steps: readonly (readonly [string, () => Promise<void>])[], log: Logger, state: { requests: number; errors: number }): Promise<string | undefined> {
  for (const [step, run] of steps) {
    try {
      await run();
    } catch (error) {
      if (error instanceof DeadlineReached) {
        log.warn('reconciler stopped before its Lambda timeout; the next run goes on', { requests: state.requests });
        return 'deadline';
      }
      if (error instanceof RateReserveReached) {
        log.warn('reconciler stopped at the rate limit reserve; the next run goes on', { credential: error.credential, requests: state.requests });
        return error.credential;
      }
      log.error('a reconciler step failed; going on', { step, error: (error as Error).message });
      state.errors++;
    }
  }
  return undefined;
}
