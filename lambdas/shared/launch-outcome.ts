import { describeError, errorName, isThrottling, UnknownOutcomeError } from './aws-call';

/**
 * Settling a launch whose answer was lost (RunInstances, CreateFleet), by observing it. Each
 * launch carries a ClientToken, also as its instances' launch-token tag. EC2 documents a launch
 * with a ClientToken as idempotent: a resend with the same token that EC2 has launched for
 * returns that launch's instances, and one it has not launched for launches them (EC2 API
 * reference, "Ensuring idempotency"). It does not document a first call EC2 is still
 * executing when the resend arrives: that resend may be refused, or answered with nothing
 * launched, and the first may still land. So only an answered resend that names instances
 * settles a lost answer; a refused or empty one is looked up once more and otherwise stays
 * unknown (its ticket is kept, and no other type, subnet or market is tried beside it).
 * moto ignores the token (a resend launches again): each resend is preceded by a look-up by
 * the token tag, so a launch that is visible is never sent again.
 */

/** Sends of one launch at most (the first and its resends): a fault on each of them leaves the outcome unknown. */
export const LAUNCH_SENDS = 3;

/** What a look-up by the launch token found. */
export type LaunchLookUp = { readonly kind: 'found'; readonly ids: readonly string[] } | { readonly kind: 'none' } | { readonly kind: 'unreadable'; readonly error: string };

/**
 * What a send's error says about the launch: `refused` (EC2 answered and launched nothing, for
 * this token) or `lost` (no answer: a timeout, a reset, a 5xx). Throttling means the request was
 * not executed: a refusal of a first send, but no answer about the token on a resend.
 */
export function sendErrorKind(error: unknown, resend: boolean): 'refused' | 'lost' {
  if (error instanceof UnknownOutcomeError) return 'lost';
  return resend && isThrottling(error) ? 'lost' : 'refused';
}

/**
 * The next step after a lost answer was looked up by its token (`sends` sent so far): what is
 * found launched; nothing found is sent again with the same token (idempotent on EC2), up to
 * `LAUNCH_SENDS`; a look-up that failed leaves it unknown (a blind resend could launch twice on
 * a service that ignored the token).
 */
export function afterLostAnswer(look: LaunchLookUp, sends: number): 'launched' | 'resend' | 'unknown' {
  if (look.kind === 'found') return 'launched';
  if (look.kind === 'unreadable') return 'unknown';
  return sends < LAUNCH_SENDS ? 'resend' : 'unknown';
}

export type SettledLaunch<T> =
  /** A send was answered (the first, or a resend with the same token, which returns what the first launched). */
  | { readonly kind: 'answered'; readonly out: T; readonly lost: number }
  /** A lost answer, and the look-up by its token found what it launched. */
  | { readonly kind: 'found'; readonly ids: readonly string[]; readonly lost: number }
  /** EC2 refused the token's first send, with no answer lost before: nothing launched. */
  | { readonly kind: 'refused'; readonly error: unknown; readonly lost: number }
  /** Every send lost its answer and nothing was found, the look-up failed, or a resend launched nothing: it may have launched. */
  | { readonly kind: 'unknown'; readonly error: string; readonly lost: number };

/**
 * A resend after a lost answer that launched nothing (refused, or answered without instances),
 * looked up by its token once more: what is found launched; otherwise the earlier send may
 * still be executing and land, so the outcome stays unknown, never a refusal.
 */
export function afterEmptyResend(look: LaunchLookUp): 'launched' | 'unknown' {
  return look.kind === 'found' ? 'launched' : 'unknown';
}

/**
 * Sends a launch and settles it: the I/O around `sendErrorKind`, `afterLostAnswer` and
 * `afterEmptyResend`. `send` must send the same request (the same ClientToken) every time;
 * `lookUp` lists the ids of the instances carrying its token; `launchedIds` the ids an
 * answer names.
 */
export async function settleLaunch<T>(send: () => Promise<T>, lookUp: () => Promise<readonly string[]>, launchedIds: (out: T) => readonly string[]): Promise<SettledLaunch<T>> {
  let lost = 0;
  for (let sends = 1; ; sends++) {
    let error: unknown;
    // A resend after a lost answer that launched nothing (refused, or answered empty).
    let empty = false;
    try {
      const out = await send();
      if (lost === 0 || launchedIds(out).length > 0) return { kind: 'answered', out, lost };
      error = new Error('a resend with the same token was answered with no instance');
      empty = true;
    } catch (e) {
      error = e;
      if (sendErrorKind(e, sends > 1) === 'lost') lost++;
      else if (lost === 0) return { kind: 'refused', error: e, lost };
      else empty = true;
    }
    const look = await lookUpToken(lookUp);
    if (empty) {
      if (afterEmptyResend(look) === 'launched' && look.kind === 'found') return { kind: 'found', ids: look.ids, lost };
      const lookUpError = look.kind === 'unreadable' ? `; look-up failed: ${look.error}` : '';
      return { kind: 'unknown', error: `resend launched nothing after ${lost} lost answer(s): ${describeError(error)}${lookUpError}`, lost };
    }
    const next = afterLostAnswer(look, sends);
    if (next === 'launched' && look.kind === 'found') return { kind: 'found', ids: look.ids, lost };
    if (next === 'unknown') return { kind: 'unknown', error: look.kind === 'unreadable' ? `look-up failed: ${look.error}` : describeError(error), lost };
  }
}

async function lookUpToken(lookUp: () => Promise<readonly string[]>): Promise<LaunchLookUp> {
  try {
    const ids = await lookUp();
    return ids.length > 0 ? { kind: 'found', ids } : { kind: 'none' };
  } catch (e) {
    return { kind: 'unreadable', error: errorName(e) };
  }
}
