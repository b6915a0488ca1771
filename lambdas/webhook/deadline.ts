/**
 * One overall deadline per webhook request. GitHub and GitLab give a delivery about 10 s; a
 * cold container could otherwise spend its step bounds one after another (fleet config,
 * secrets, tag lookup, SQS send) and answer too late. Each step gets its own cap, clipped to
 * what remains after keeping `keepMs` for the steps that must still run (the SQS send).
 */

/** A step's timeout: its cap, or the time remaining minus what later steps need; 0 means no time is left. */
export function stepTimeoutMs(remainingMs: number, capMs: number, keepMs: number): number {
  return Math.max(0, Math.floor(Math.min(capMs, remainingMs - keepMs)));
}

export class DeadlineExceeded extends Error {
  constructor(
    readonly step: string,
    readonly timeoutMs: number,
  ) {
    super(timeoutMs === 0 ? `no time left for the ${step} before the request deadline` : `${step} exceeded its ${timeoutMs} ms share of the request deadline`);
    this.name = 'DeadlineExceeded';
  }
}

export interface Deadline {
  remainingMs(): number;
  /**
   * Runs one step with a signal that aborts at the step's timeout, and rejects with
   * DeadlineExceeded then even when the step ignores its signal (an SDK middleware, a mock).
   */
  run<T>(step: string, capMs: number, keepMs: number, fn: (signal: AbortSignal) => Promise<T>): Promise<T>;
}

export function createDeadline(totalMs: number, clock: () => number = () => performance.now()): Deadline {
  const end = clock() + totalMs;
  const remainingMs = () => end - clock();
  return {
    remainingMs,
    async run(step, capMs, keepMs, fn) {
      const ms = stepTimeoutMs(remainingMs(), capMs, keepMs);
      if (ms === 0) throw new DeadlineExceeded(step, 0);
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const e = new DeadlineExceeded(step, ms);
          controller.abort(e);
          reject(e);
        }, ms);
      });
      try {
        return await Promise.race([fn(controller.signal), expired]);
      } catch (e) {
        // A step that gives up on its aborted signal at once (the SDK's AbortError) can settle
        // the race before the deadline's own rejection does: the deadline is still the cause.
        if (controller.signal.aborted) throw controller.signal.reason;
        throw e;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
