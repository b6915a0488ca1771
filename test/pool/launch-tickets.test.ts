import { describe, expect, it } from 'vitest';
import { delaySeconds, freshStreak, ticketNeed, type PrimeStreak } from '../../lambdas/pool/backoff';
import { heldWithoutTicket } from '../../lambdas/scale-up/decide';
import { keptTicketFields, readBack, ticketExpiry, ticketKey } from '../../lambdas/shared/launch-tickets';
import { JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_ATTRIBUTES, LAUNCH_TICKET_SETTLE_SECONDS } from '../../lambdas/shared/contract';

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
