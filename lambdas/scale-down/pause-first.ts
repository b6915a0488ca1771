import { errorName, withTimeout } from '../shared/aws-call';
import type { CiProvider } from '../shared/contract';
import type { Logger } from '../shared/log';
import { busyAtProvider } from './busy-check';

/** What a pause or unpause came to, the answer read back when the call's own was lost. */
export type PauseState = 'applied' | 'not-applied' | 'gone' | 'unknown';

/** What `deregisterIdleRunner` did with an idle runner. */
export type IdleDeregistration =
  | { readonly deleted: true }
  | {
      readonly deleted: false;
      readonly why: 'running-job' | 'unknown' | 'pause-failed' | 'delete-failed';
      readonly error?: string;
      /** Whether the pause was undone (absent: nothing to undo). */
      readonly unpause?: PauseState;
    };

/**
 * A pause whose answer was lost may have happened: the runner read back decides. `readBack` is
 * its `paused` flag, `undefined` when the service no longer has it, `failed` when the read-back
 * failed too (then nobody knows, and the caller must undo what may have happened).
 */
export function resolvePause(wanted: boolean, readBack: boolean | undefined | 'failed'): PauseState {
  if (readBack === 'failed') return 'unknown';
  if (readBack === undefined) return 'gone';
  return readBack === wanted ? 'applied' : 'not-applied';
}

/** Sets the runner's pause, resolving a lost answer by reading the runner back (never guessed). */
export async function setPaused(ci: CiProvider, runnerId: string, paused: boolean, timeoutMs: number): Promise<{ state: PauseState; error?: string }> {
  if (!ci.setRunnerPaused || !ci.runnerPaused) throw new Error(`${ci.provider} cannot pause a runner`);
  try {
    await withTimeout(paused ? 'pauseRunner' : 'unpauseRunner', timeoutMs, () => ci.setRunnerPaused!(runnerId, paused));
    return { state: 'applied' };
  } catch (error) {
    let readBack: boolean | undefined | 'failed';
    try {
      readBack = await withTimeout('runnerPaused', timeoutMs, () => ci.runnerPaused!(runnerId));
    } catch {
      readBack = 'failed';
    }
    return { state: resolvePause(paused, readBack), error: errorName(error) };
  }
}

/** Undoes a pause (or one that may have happened): a second attempt when the first was not applied. */
async function unpause(ci: CiProvider, runnerId: string, timeoutMs: number): Promise<PauseState> {
  const first = await setPaused(ci, runnerId, false, timeoutMs);
  return first.state === 'not-applied' ? (await setPaused(ci, runnerId, false, timeoutMs)).state : first.state;
}

/**
 * The DELETE of a runner the sweep read idle, guarded by the provider's own last reading. Where
 * the provider can pause a runner (GitLab, whose DELETE refuses nothing), it is paused FIRST, then
 * asked for running jobs, then deleted only if it has none: a paused runner is handed no new job,
 * so the runner cannot take one between the reading and the DELETE. On every path that keeps the
 * runner the pause is undone, a pause whose answer was lost included. Without pausing (GitHub,
 * whose DELETE refuses a busy runner), the reading and the DELETE as before.
 */
export async function deregisterIdleRunner(ci: CiProvider, runnerId: string, timeoutMs: number): Promise<IdleDeregistration> {
  const pausing = Boolean(ci.setRunnerPaused && ci.runnerPaused);
  if (pausing) {
    const pause = await setPaused(ci, runnerId, true, timeoutMs);
    if (pause.state === 'gone') return { deleted: true };
    if (pause.state === 'not-applied') return { deleted: false, why: 'pause-failed', ...(pause.error ? { error: pause.error } : {}) };
    if (pause.state === 'unknown') return { deleted: false, why: 'pause-failed', ...(pause.error ? { error: pause.error } : {}), unpause: await unpause(ci, runnerId, timeoutMs) };
  }
  const keep = async (why: 'running-job' | 'unknown' | 'delete-failed', error?: string): Promise<IdleDeregistration> => ({
    deleted: false,
    why,
    ...(error ? { error } : {}),
    ...(pausing ? { unpause: await unpause(ci, runnerId, timeoutMs) } : {}),
  });
  const atProvider = await busyAtProvider(ci, runnerId, timeoutMs);
  if (atProvider.busy) return keep(atProvider.why, atProvider.error);
  try {
    await withTimeout('deleteRunner', timeoutMs, () => ci.deleteRunner(runnerId));
    return { deleted: true };
  } catch (error) {
    // The DELETE may have happened with its answer lost: the unpause's read-back says `gone` then.
    const kept = await keep('delete-failed', errorName(error));
    return !kept.deleted && kept.unpause === 'gone' ? { deleted: true } : kept;
  }
}

/** Why an idle runner was kept, and whether a pause the sweep set was undone (an error if it may not be). */
export function logKept(log: Logger, outcome: IdleDeregistration & { deleted: false }, fields: Record<string, string | undefined>): void {
  const detail = { ...fields, why: outcome.why, ...(outcome.error ? { error: outcome.error } : {}), ...(outcome.unpause ? { unpause: outcome.unpause } : {}) };
  if (outcome.why === 'running-job' || outcome.why === 'unknown') {
    log[outcome.why === 'unknown' ? 'warn' : 'info']('keeping the instance: the provider lists a running job of its runner, or could not say', detail);
  } else if (outcome.why === 'pause-failed') {
    log.warn('keeping the instance: its runner could not be paused before the last reading', detail);
  } else {
    log.warn('keeping the instance: its runner could not be deregistered (busy now, or the provider failed)', detail);
  }
  if (outcome.unpause === 'not-applied' || outcome.unpause === 'unknown') {
    log.error('the runner may be left paused (it takes no new job): unpause it, or let a later idle reading remove it', detail);
  }
}
