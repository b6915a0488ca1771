import { createHash } from 'node:crypto';
import type { DefaultTargetCapacityType } from '@aws-sdk/client-ec2';
import { FLEET_DEFAULTS, type PoolConfig, type TagKeys } from '../shared/contract';
import type { ObservedInstance } from '../shared/instances';

/**
 * The launch tokens of cold launches (CreateFleet's ClientToken, also the instance's
 * launch-token tag), pure. A token names the message, its receive count and the capacity
 * type asked for, so every receive of a message knows the tokens of the receives before it:
 * a launch whose answer was lost can be found by a later receive, not only by its own.
 */

/** Which receive of which message a cold launch serves. */
export interface LaunchAttempt {
  readonly messageId: string;
  /** SQS's ApproximateReceiveCount: 1 on the first receive. */
  readonly receiveCount: number;
}

/**
 * Earlier receives looked up before a launch, at most: two tokens each (spot, on-demand) keep
 * the one tag filter at 100 values. The redrive default is 5 receives; a launch older than this
 * many receives is left to the scale-down (`no-runner`), as every launch was before.
 */
export const EARLIER_RECEIVES_LOOKED_UP = 50;

/** A receive count SQS did not give (or gave unreadable) counts as the first. */
export function launchAttemptOf(messageId: string, receiveCount: string | undefined): LaunchAttempt {
  const n = Number(receiveCount ?? '1');
  return { messageId, receiveCount: Number.isInteger(n) && n >= 1 ? n : 1 };
}

export function launchToken(attempt: LaunchAttempt, capacityType: DefaultTargetCapacityType): string {
  return createHash('sha256').update(`${attempt.messageId}|${attempt.receiveCount}|${capacityType}`).digest('hex').slice(0, 64);
}

/** The capacity types a launch asks for, in order: spot falls back to on-demand under the same receive. */
export function capacityTypesOf(spot: boolean): DefaultTargetCapacityType[] {
  return spot ? ['spot', 'on-demand'] : ['on-demand'];
}

/** The tokens the message's earlier receives launched with (none on the first receive). */
export function earlierLaunchTokens(attempt: LaunchAttempt, spot: boolean): string[] {
  const tokens: string[] = [];
  for (let r = Math.max(1, attempt.receiveCount - EARLIER_RECEIVES_LOOKED_UP); r < attempt.receiveCount; r++) {
    for (const type of capacityTypesOf(spot)) tokens.push(launchToken({ messageId: attempt.messageId, receiveCount: r }, type));
  }
  return tokens;
}

/**
 * Seconds before the end of a booting instance's config wait past which it is not taken over:
 * the config written then may come after its last poll, and the instance would end with its
 * start failure while the job waits for the retry check. Covers the take-over's own steps
 * (registration, config write) and a poll interval.
 */
export const ADOPT_SAFETY_SECONDS = 60;

/** Seconds after its launch an earlier instance may still be taken over (at least 0). */
export function adoptWindowSeconds(pool: Pick<PoolConfig, 'bootWaitSeconds'>): number {
  return Math.max(0, (pool.bootWaitSeconds ?? FLEET_DEFAULTS.bootWaitSeconds) - ADOPT_SAFETY_SECONDS);
}

/**
 * Seconds after its launch an earlier instance that was not taken over may still be waiting for
 * its config: its boot to WAIT (1.5 to 4 minutes from a stock image, DESIGN.md) and its config
 * wait. Past it the instance has ended its start failure, or is stuck and left to the
 * scale-down's no-runner rule.
 */
export function earlierLiveSeconds(pool: Pick<PoolConfig, 'bootWaitSeconds'>): number {
  return (pool.bootWaitSeconds ?? FLEET_DEFAULTS.bootWaitSeconds) + 5 * 60;
}

/** What a redelivery does about the instances its message's earlier receives launched. */
export type EarlierLaunch =
  /** Take it over: no launch. */
  | { readonly kind: 'take-over'; readonly instance: ObservedInstance }
  /** One is still waiting for its config, too late to take over: launch nothing beside it until `until`. */
  | { readonly kind: 'busy'; readonly instance: ObservedInstance; readonly until: Date };

/**
 * Of the instances an earlier receive launched, the one this receive takes over or waits for:
 * live, never given a runner (no runner id tag: its receive failed before the end of the
 * launch). One launched less than `windowSeconds` ago is taken over; an older one may be in its
 * last config poll or terminating itself, so it is not taken over, but while it may still be
 * waiting (`liveSeconds`) no second instance is launched beside it on the message's ticket
 * (`busy`); an older one is left to the scale-down's no-runner rule. One with a runner id
 * finished its launch; the plan (decide.ts) settles a job such an instance serves, so finding
 * one here means the job wants another runner. Never a warm standby: a cold instance of a
 * reusable pool that parked after its job carries the tag and keeps its launch token, and may be
 * parking or serving a later job. The oldest, so every receive picks the same one.
 */
export function earlierLaunch(found: readonly ObservedInstance[], keys: TagKeys, now: Date, windowSeconds: number, liveSeconds: number): EarlierLaunch | undefined {
  const age = (i: ObservedInstance) => now.getTime() - i.launchTime.getTime();
  const unserved = found
    .filter((i) => (i.state === 'pending' || i.state === 'running') && !i.tags.has(keys.runnerId) && !i.tags.has(keys.warmStandby))
    .sort((a, b) => a.launchTime.getTime() - b.launchTime.getTime() || a.id.localeCompare(b.id));
  const young = unserved.find((i) => age(i) < windowSeconds * 1000);
  if (young) return { kind: 'take-over', instance: young };
  const waiting = unserved.filter((i) => age(i) < liveSeconds * 1000);
  if (waiting.length === 0) return undefined;
  const until = new Date(Math.max(...waiting.map((i) => i.launchTime.getTime() + liveSeconds * 1000)));
  return { kind: 'busy', instance: waiting[0]!, until };
}
