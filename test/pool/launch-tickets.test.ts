import { describe, expect, it } from 'vitest';
import { delaySeconds, freshStreak, ticketNeed, type PrimeStreak } from '../../lambdas/pool/backoff';
import { heldWithoutTicket } from '../../lambdas/scale-up/decide';
import { keptTicketFields, readBack, ticketExpiry, ticketKey, unspentTickets } from '../../lambdas/shared/launch-tickets';
import { afterEmptyResend, afterLostAnswer, LAUNCH_SENDS, sendErrorKind, settleLaunch } from '../../lambdas/shared/launch-outcome';
import { UnknownOutcomeError } from '../../lambdas/shared/aws-call';
import { fleetConfig } from '../support/fixtures';
import { FLEET_DEFAULTS, JOB_MAX_WAIT_SECONDS, JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_ATTRIBUTES, LAUNCH_TICKET_SETTLE_SECONDS, launchTicketHoldSeconds } from '../../lambdas/shared/contract';

const T0 = new Date('2026-11-29T12:00:00.000Z');
const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);
const policy = { limit: 3, capSeconds: 1800 };
const failing = (failures: number, proven: boolean): PrimeStreak => ({ ...freshStreak('lt-1:4'), proven, failures, lastFailureAt: at(0).toISOString() });

describe('a ticket expiry (pure)', () => {
  it('is whole seconds after now, as the TTL attribute holds it', () => {
    expect(ticketExpiry(new Date(T0.getTime() + 999), 2700)).toBe(at(2700).toISOString());
    expect(Date.parse(ticketExpiry(at(1), 60)) / 1000).toBe(Math.floor(at(61).getTime() / 1000));
  });
});

describe('which launch tickets a launch needs (pure)', () => {
  it('none for a proven template that is not failing: the fast path stays a read', () => {
    expect(ticketNeed({ ...freshStreak('lt-1:4'), proven: true }, policy, 900)).toBeUndefined();
  });
  it('one of the limit start tickets while the template is unproven and below the limit', () => {
    for (const s of [freshStreak('lt-1:4'), failing(1, false), failing(2, false)]) {
      expect(ticketNeed(s, policy, 900)).toEqual({ template: 'lt-1:4', slots: ['start#1', 'start#2', 'start#3'], holdSeconds: 900 + LAUNCH_TICKET_SETTLE_SECONDS });
    }
  });
  it('the one probe ticket of the window once backing off, or while a proven template fails', () => {
    const window = (failures: number) => `probe#${at(delaySeconds(failures, policy)).toISOString()}`;
    expect(ticketNeed(failing(3, false), policy, 900)).toEqual({ template: 'lt-1:4', slots: [window(3)], holdSeconds: 900 + LAUNCH_TICKET_SETTLE_SECONDS });
    expect(ticketNeed(failing(1, true), policy, 900)?.slots).toEqual([window(1)]);
    // A later failure opens a later window: its own ticket.
    const later = { ...failing(4, false), lastFailureAt: at(2000).toISOString() };
    expect(ticketNeed(later, policy, 900)?.slots).toEqual([`probe#${at(3800).toISOString()}`]);
  });
  it('keys a ticket by pool, template and slot, never like a job id', () => {
    expect(ticketKey('linux', 'lt-1:4@ami-1', 'start#2')).toBe('launch-ticket|linux|lt-1:4@ami-1|start#2');
    expect(ticketKey('linux', 'lt-1:4', 'start#1')).not.toMatch(/^(github|gitlab):/);
  });
});

describe('reading a ticket back after a lost answer (pure)', () => {
  const item = (owner: string, expiresAt: Date) => ({
    [LAUNCH_TICKET_ATTRIBUTES.owner]: { S: owner },
    [JOB_RECORD_ATTRIBUTES.expiresAt]: { N: String(Math.floor(expiresAt.getTime() / 1000)) },
  });
  it('is won with our owner token, lost with another live one, absent when nothing live is there', () => {
    expect(readBack(item('me', at(600)), 'me', at(0))).toBe('won');
    expect(readBack(item('other', at(600)), 'me', at(0))).toBe('lost');
    expect(readBack(item('other', at(-1)), 'me', at(0))).toBe('absent');
    expect(readBack(undefined, 'me', at(0))).toBe('absent');
  });
});

describe('cold jobs that got no ticket (pure)', () => {
  const job = (key: string, ageSeconds: number) => ({ key, pool: { name: 'linux' }, job: { receivedAt: at(-ageSeconds).toISOString() } });
  it('wait until the window or their capacity backoff, and dead-letter past their maximum wait', () => {
    const gates = new Map([['linux', { launch: 1, resumeAt: at(-5), held: 'backoff' as const, ticket: { template: 't', slots: ['probe#x'], holdSeconds: 1 } }]]);
    const v = heldWithoutTicket([job('a', 10), job('b', 4000)], gates, at(0), 3600);
    expect(v.get('a')).toEqual({ kind: 'hold', held: 'backoff', resumeAt: at(-5) });
    expect(v.get('b')).toEqual({ kind: 'hold-expired', held: 'backoff' });
  });
  it('name the reason from the ticket when the gate let all launch', () => {
    const start = new Map([['linux', { launch: 2, ticket: { template: 't', slots: ['start#1', 'start#2'], holdSeconds: 1 } }]]);
    expect(heldWithoutTicket([job('a', 1)], start, at(0), 3600).get('a')).toEqual({ kind: 'hold', held: 'unproven' });
  });
});

describe('the log fields of a kept launch ticket (pure)', () => {
  it('name the pool, the item key, the owner token a conditional delete needs, and the expiry', () => {
    const ticket = { key: ticketKey('linux', 'lt-1:4', 'start#1'), owner: 'token-1', expiresAt: at(2700).toISOString() };
    expect(keptTicketFields('linux', ticket)).toEqual({ pool: 'linux', ticketKey: 'launch-ticket|linux|lt-1:4|start#1', ticketOwner: 'token-1', ticketExpiresAt: '2026-11-29T12:45:00.000Z' });
  });
});

describe('settling a launch whose answer was lost (pure)', () => {
  const lost = new UnknownOutcomeError('RunInstances', new Error('reset'));
  const throttled = Object.assign(new Error('slow down'), { name: 'RequestLimitExceeded', $metadata: { httpStatusCode: 503 } });
  const refused = Object.assign(new Error('bad'), { name: 'InvalidParameterValue', $metadata: { httpStatusCode: 400 } });
  it('a lost answer is no refusal; throttling refuses a first send, but says nothing about the token on a resend', () => {
    expect(sendErrorKind(lost, false)).toBe('lost');
    expect(sendErrorKind(refused, false)).toBe('refused');
    expect(sendErrorKind(refused, true)).toBe('refused');
    expect(sendErrorKind(throttled, false)).toBe('refused');
    expect(sendErrorKind(throttled, true)).toBe('lost');
  });
  it('after the look-up: found is launched; nothing found is resent with the same token, up to the bound; a failed look-up stays unknown', () => {
    expect(afterLostAnswer({ kind: 'found', ids: ['i-1'] }, 1)).toBe('launched');
    expect(afterLostAnswer({ kind: 'none' }, 1)).toBe('resend');
    expect(afterLostAnswer({ kind: 'none' }, LAUNCH_SENDS - 1)).toBe('resend');
    expect(afterLostAnswer({ kind: 'none' }, LAUNCH_SENDS)).toBe('unknown');
    expect(afterLostAnswer({ kind: 'unreadable', error: 'x' }, 1)).toBe('unknown');
  });
  it('a resend that launched nothing after a lost answer: found by its token is launched, else unknown (the lost send may land)', () => {
    expect(afterEmptyResend({ kind: 'found', ids: ['i-1'] })).toBe('launched');
    expect(afterEmptyResend({ kind: 'none' })).toBe('unknown');
    expect(afterEmptyResend({ kind: 'unreadable', error: 'x' })).toBe('unknown');
  });
  it('settles by sending the same request: answered, found, refused or unknown', async () => {
    const sends: string[] = [];
    const send = (answers: (() => string)[]) => async () => {
      sends.push('send');
      return answers[sends.length - 1]!();
    };
    const fail = (e: unknown) => () => {
      throw e;
    };
    const ids = (out: string) => (out === 'empty' ? [] : [out]);
    expect(await settleLaunch(send([fail(lost), () => 'ok']), async () => [], ids)).toEqual({ kind: 'answered', out: 'ok', lost: 1 });
    sends.length = 0;
    expect(await settleLaunch(send([fail(lost)]), async () => ['i-1'], ids)).toEqual({ kind: 'found', ids: ['i-1'], lost: 1 });
    sends.length = 0;
    // Only a first send's refusal is one: nothing was lost before it.
    expect(await settleLaunch(send([fail(refused)]), async () => [], ids)).toMatchObject({ kind: 'refused', error: refused, lost: 0 });
    sends.length = 0;
    // A first send answered empty (CreateFleet's capacity errors) is the caller's to read.
    expect(await settleLaunch(send([() => 'empty']), async () => [], ids)).toEqual({ kind: 'answered', out: 'empty', lost: 0 });
    sends.length = 0;
    // A resend refused, or answered with no instance, after a lost answer: the lost send may
    // still be executing and land, so it is unknown (not a refusal that moves on), unless the
    // token's look-up finds it.
    expect(await settleLaunch(send([fail(lost), fail(refused)]), async () => [], ids)).toMatchObject({ kind: 'unknown', lost: 1 });
    expect(sends).toHaveLength(2);
    sends.length = 0;
    expect(await settleLaunch(send([fail(lost), () => 'empty']), async () => [], ids)).toMatchObject({ kind: 'unknown', lost: 1 });
    sends.length = 0;
    let looks = 0;
    expect(await settleLaunch(send([fail(lost), () => 'empty']), async () => (++looks > 1 ? ['i-late'] : []), ids)).toEqual({ kind: 'found', ids: ['i-late'], lost: 1 });
    sends.length = 0;
    expect(await settleLaunch(send([fail(lost), fail(throttled), fail(lost)]), async () => [], ids)).toMatchObject({ kind: 'unknown', lost: LAUNCH_SENDS });
    expect(sends).toHaveLength(LAUNCH_SENDS);
    sends.length = 0;
    expect(await settleLaunch(send([fail(lost)]), async () => Promise.reject(new Error('denied')), ids)).toMatchObject({ kind: 'unknown', lost: 1 });
    expect(sends).toHaveLength(1);
  });
});

describe('releasing a ticket (pure)', () => {
  it('gives back what did not launch, and nothing while the outcome is unknown', () => {
    const taken = ['a', 'b', 'c'].map((k) => ({ key: k, owner: 'o', expiresAt: at(60).toISOString() }));
    expect(unspentTickets(taken, 0, false)).toEqual(taken);
    expect(unspentTickets(taken, 2, false)).toEqual([taken[2]]);
    expect(unspentTickets(taken, 3, false)).toEqual([]);
    expect(unspentTickets(taken, 0, true)).toEqual([]);
  });
});

describe("a ticket's hold and a job's maximum wait (pure)", () => {
  it('a ticket spent on a launch frees before a job waiting behind it is dead-lettered, with the default priming timeout', () => {
    expect(launchTicketHoldSeconds(FLEET_DEFAULTS.primingTimeoutSeconds)).toBeLessThan(JOB_MAX_WAIT_SECONDS);
  });
  it('the fleet config refuses a priming timeout whose ticket would outlive that wait, naming the bound', () => {
    const priming = JOB_MAX_WAIT_SECONDS - LAUNCH_TICKET_SETTLE_SECONDS;
    expect(() => fleetConfig({ primingTimeoutSeconds: priming - 1 })).not.toThrow();
    expect(() => fleetConfig({ primingTimeoutSeconds: priming })).toThrow(/warm\.primingTimeoutSeconds is 55 minutes: a launch of an unproven or failing template holds its launch ticket .* use less than 55 minutes/);
  });
});
