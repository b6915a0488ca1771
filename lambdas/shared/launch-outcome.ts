import { describeError, errorName, isThrottling, UnknownOutcomeError } from './aws-call';

/**
 * Settling a launch whose answer was lost (RunInstances, CreateFleet), by observing it. Each
 * launch carries a ClientToken, also as its instances' launch-token tag. EC2 makes a launch with
 * a ClientToken idempotent: a resend with the same token returns the first call's instances if
 * that one launched, and launches them if it did not; a first call that reaches EC2 after the
 * resend launches nothing more (EC2 API reference, "Ensuring idempotency"). So a resend that is
 * answered settles the outcome either way, and only then may a ticket be given back for a
 * launch that did not happen. moto ignores the token (a resend launches again): each resend is
 * preceded by a look-up by the token tag, so a launch that is visible is never sent again.
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
  /** EC2 refused the token's launch: nothing launched. */
  | { readonly kind: 'refused'; readonly error: unknown; readonly lost: number }
  /** Every send lost its answer and nothing was found, or the look-up failed: it may have launched. */
  | { readonly kind: 'unknown'; readonly error: string; readonly lost: number };

/**
 * Sends a launch and settles it: the I/O around `sendErrorKind` and `afterLostAnswer`. `send`
 * must send the same request (the same ClientToken) every time; `lookUp` lists the ids of the
 * instances carrying its token.
 */
export async function settleLaunch<T>(send: () => Promise<T>, lookUp: () => Promise<readonly string[]>): Promise<SettledLaunch<T>> {
  let lost = 0;
  for (let sends = 1; ; sends++) {
    let error: unknown;
    try {
      return { kind: 'answered', out: await send(), lost };
    } catch (e) {
      if (sendErrorKind(e, sends > 1) === 'refused') return { kind: 'refused', error: e, lost };
      error = e;
      lost++;
    }
    let look: LaunchLookUp;
    try {
      const ids = await lookUp();
      look = ids.length > 0 ? { kind: 'found', ids } : { kind: 'none' };
    } catch (e) {
      look = { kind: 'unreadable', error: errorName(e) };
    }
    const next = afterLostAnswer(look, sends);
    if (next === 'launched' && look.kind === 'found') return { kind: 'found', ids: look.ids, lost };
    if (next === 'unknown') return { kind: 'unknown', error: look.kind === 'unreadable' ? `look-up failed: ${look.error}` : describeError(error), lost };
  }
}
