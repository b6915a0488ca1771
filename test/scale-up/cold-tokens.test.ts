import { describe, expect, it } from 'vitest';
import { ADOPT_SAFETY_SECONDS, adoptWindowSeconds, earlierLaunch, earlierLaunchTokens, earlierLiveSeconds, EARLIER_RECEIVES_LOOKED_UP, launchAttemptOf, launchToken } from '../../lambdas/scale-up/cold-tokens';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { KEYS } from '../support/fixtures';
import { FLEET_DEFAULTS } from '../../lambdas/shared/contract';

const at = (s: number) => new Date(Date.UTC(2026, 10, 29, 12, 0, s));
function inst(id: string, state: string, launched: number, tags: Record<string, string> = {}): ObservedInstance {
  return { id, state, launchTime: at(launched), tags: new Map(Object.entries(tags)) };
}

describe('cold launch tokens', () => {
  it('name the message, the receive and the capacity type, 64 hex characters', () => {
    const a = launchToken({ messageId: 'm', receiveCount: 1 }, 'on-demand');
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(launchToken({ messageId: 'm', receiveCount: 1 }, 'on-demand')).toBe(a);
    expect(new Set([a, launchToken({ messageId: 'm', receiveCount: 2 }, 'on-demand'), launchToken({ messageId: 'm', receiveCount: 1 }, 'spot'), launchToken({ messageId: 'n', receiveCount: 1 }, 'on-demand')]).size).toBe(4);
  });

  it("the first receive looks up nothing; a later one every earlier receive's tokens, spot's on-demand fallback included", () => {
    expect(earlierLaunchTokens({ messageId: 'm', receiveCount: 1 }, true)).toEqual([]);
    expect(earlierLaunchTokens({ messageId: 'm', receiveCount: 3 }, false)).toEqual([1, 2].map((r) => launchToken({ messageId: 'm', receiveCount: r }, 'on-demand')));
    expect(earlierLaunchTokens({ messageId: 'm', receiveCount: 2 }, true)).toEqual([launchToken({ messageId: 'm', receiveCount: 1 }, 'spot'), launchToken({ messageId: 'm', receiveCount: 1 }, 'on-demand')]);
  });

  it('looks back a bounded number of receives, the latest ones', () => {
    const tokens = earlierLaunchTokens({ messageId: 'm', receiveCount: 1000 }, true);
    expect(tokens).toHaveLength(2 * EARLIER_RECEIVES_LOOKED_UP);
    expect(tokens.at(-1)).toBe(launchToken({ messageId: 'm', receiveCount: 999 }, 'on-demand'));
    expect(tokens[0]).toBe(launchToken({ messageId: 'm', receiveCount: 1000 - EARLIER_RECEIVES_LOOKED_UP }, 'spot'));
  });

  it('reads a missing or unreadable receive count as the first', () => {
    expect(launchAttemptOf('m', '4')).toEqual({ messageId: 'm', receiveCount: 4 });
    for (const bad of [undefined, '', 'x', '0', '1.5', '-2']) expect(launchAttemptOf('m', bad).receiveCount).toBe(1);
  });
});

describe('earlierLaunch: which earlier launch a receive takes over, or launches nothing beside', () => {
  const now = at(10);
  const w = 240;
  const live = earlierLiveSeconds({});
  const adoptable = (found: ObservedInstance[], keys: typeof KEYS, when: Date, window: number) => {
    const e = earlierLaunch(found, keys, when, window, live);
    return e?.kind === 'take-over' ? e.instance : undefined;
  };
  it('the oldest live instance without a runner; never one with a runner, never a gone one', () => {
    const gone = inst('i-a', 'terminated', 0);
    const stopping = inst('i-b', 'shutting-down', 1);
    const served = inst('i-c', 'running', 2, { [KEYS.runnerId]: '9' });
    const later = inst('i-e', 'running', 5);
    const older = inst('i-d', 'pending', 4);
    expect(adoptable([gone, stopping, served, later, older], KEYS, now, w)?.id).toBe('i-d');
    expect(adoptable([gone, stopping, served], KEYS, now, w)).toBeUndefined();
    expect(adoptable([], KEYS, now, w)).toBeUndefined();
  });

  it('never a cold instance that parked after its job (reuse): it may be parking or serving a later job', () => {
    const parking = inst('i-p', 'running', 1, { [KEYS.warmStandby]: 'true', [KEYS.affinity]: 'github:acme/app', [KEYS.uses]: '1' });
    expect(adoptable([parking], KEYS, now, w)).toBeUndefined();
  });

  it('picks the same one whatever the order of the answer', () => {
    const a = inst('i-1', 'running', 3);
    const b = inst('i-2', 'running', 3);
    expect(adoptable([b, a], KEYS, now, w)?.id).toBe('i-1');
    expect(adoptable([a, b], KEYS, now, w)?.id).toBe('i-1');
  });

  it("never one launched the boot wait minus the safety margin ago or earlier: it may be in its last poll or on its way out", () => {
    const pool = { bootWaitSeconds: 300 };
    const window = adoptWindowSeconds(pool);
    expect(window).toBe(300 - ADOPT_SAFETY_SECONDS);
    const t0 = at(0);
    const old = inst('i-old', 'running', 0);
    const young = inst('i-young', 'running', 1);
    // The older one still inside the window wins; at the window's end it is left alone.
    expect(adoptable([old, young], KEYS, new Date(t0.getTime() + (window - 1) * 1000), window)?.id).toBe('i-old');
    expect(adoptable([old, young], KEYS, new Date(t0.getTime() + window * 1000), window)?.id).toBe('i-young');
    expect(adoptable([old, young], KEYS, new Date(t0.getTime() + (window + 1) * 1000), window)).toBeUndefined();
    expect(earlierLaunch([old, young], KEYS, new Date(t0.getTime() + (window + 1) * 1000), window, live)?.kind).toBe('busy');
    // The default wait is the boot script's; a wait shorter than the margin takes over nothing.
    expect(adoptWindowSeconds({})).toBe(FLEET_DEFAULTS.bootWaitSeconds - ADOPT_SAFETY_SECONDS);
    expect(adoptWindowSeconds({ bootWaitSeconds: 30 })).toBe(0);
    expect(adoptable([young], KEYS, at(1), 0)).toBeUndefined();
  });

  it('one too old to take over but still within its boot and config wait is busy until the last such one ends; none past it', () => {
    const pool = { bootWaitSeconds: 300 };
    const window = adoptWindowSeconds(pool);
    const liveFor = earlierLiveSeconds(pool);
    expect(liveFor).toBe(300 + 5 * 60);
    const first = inst('i-1', 'running', 0);
    const second = inst('i-2', 'pending', 5);
    const t = (s: number) => new Date(at(0).getTime() + s * 1000);
    expect(earlierLaunch([second, first], KEYS, t(window + 10), window, liveFor)).toEqual({ kind: 'busy', instance: first, until: t(5 + liveFor) });
    expect(earlierLaunch([first, second], KEYS, t(liveFor + 1), window, liveFor)).toEqual({ kind: 'busy', instance: second, until: t(5 + liveFor) });
    expect(earlierLaunch([first, second], KEYS, t(liveFor + 5), window, liveFor)).toBeUndefined();
    // One with a runner, a parked one or a gone one is never busy either.
    const served = inst('i-s', 'running', 0, { [KEYS.runnerId]: '9' });
    const gone = inst('i-g', 'shutting-down', 0);
    expect(earlierLaunch([served, gone], KEYS, t(window + 10), window, liveFor)).toBeUndefined();
  });
});
