import { describe, expect, it } from 'vitest';
import { arrivalOf, comesBack, triageByRecord, type Admission } from '../../lambdas/scale-up/decide';

const NOW = new Date('2026-11-29T12:00:00.000Z');
const at = (offsetSeconds: number) => new Date(NOW.getTime() + offsetSeconds * 1000);

describe('arrivalOf: what a message is when it arrives', () => {
  type Row = [string, { waits: number; notBefore?: Date; retryCheck?: boolean }, string | undefined, ReturnType<typeof arrivalOf>];
  const rows: Row[] = [
    ["a job's first delivery is counted as dequeued", { waits: 0 }, '1', { kind: 'ready', redelivered: false, first: true }],
    ['no receive count reads as the first receive', { waits: 0 }, undefined, { kind: 'ready', redelivered: false, first: true }],
    ['an SQS redelivery is not the first', { waits: 0 }, '2', { kind: 'ready', redelivered: true, first: false }],
    ['a wait copy due now is served, not counted again', { waits: 2, notBefore: NOW }, '1', { kind: 'ready', redelivered: false, first: false }],
    ['a wait copy past its not-before is served', { waits: 1, notBefore: at(-30) }, '1', { kind: 'ready', redelivered: false, first: false }],
    ['a wait copy before its not-before is hidden for the rest', { waits: 1, notBefore: at(42.5) }, '1', { kind: 'early', hideSeconds: 42.5 }],
    ['an early copy stays early however often it was received', { waits: 1, notBefore: at(10) }, '3', { kind: 'early', hideSeconds: 10 }],
    ['a retry check (no waits) is not a first delivery: its job was dequeued and served before', { waits: 0, notBefore: at(-1), retryCheck: true }, '1', { kind: 'ready', redelivered: false, first: false }],
  ];
  it.each(rows)('%s', (_name, wait, receiveCount, expected) => {
    expect(arrivalOf({ retryCheck: false, ...wait }, receiveCount, NOW)).toEqual(expected);
  });
});

describe('comesBack: a message whose job may have moved on since it was queued', () => {
  it.each([
    [false, 0, false],
    [true, 0, true],
    [false, 1, true],
    [true, 3, true],
  ])('redelivered %s, waits %i: %s', (redelivered, waits, expected) => {
    expect(comesBack({ redelivered, waits })).toBe(expected);
  });
});

describe('triageByRecord: which messages go on to be decided after the record claim', () => {
  interface M {
    readonly name: string;
    readonly retryCheck: boolean;
  }
  const m = (name: string, retryCheck = false): M => ({ name, retryCheck });
  const admission = (a: Partial<{ dropped: M[]; served: M[]; unrecorded: M[]; superseded: M[] }>): Admission<M> => ({
    dropped: a.dropped ?? [],
    served: (a.served ?? []).map((item) => ({ item })),
    unrecorded: a.unrecorded ?? [],
    superseded: new Map((a.superseded ?? []).map((i) => [i, ['i-earlier']])),
  });
  const names = (ms: readonly M[]) => ms.map((x) => x.name);

  it('admitted jobs proceed in the batch order; dropped, served and gone copies do not', () => {
    const [a, dropped, b, served, gone, c] = [m('a'), m('dropped'), m('b'), m('served'), m('gone'), m('c')];
    const t = triageByRecord([a, dropped, b, served, gone, c], admission({ dropped: [dropped], served: [served] }), [gone]);
    expect(names(t.proceed)).toEqual(['a', 'b', 'c']);
    expect(t.strays).toEqual([]);
    expect(t.unread).toEqual([]);
  });

  it('a job admitted without a record proceeds (served without one)', () => {
    const a = m('a');
    expect(names(triageByRecord([a], admission({ unrecorded: [a] }), []).proceed)).toEqual(['a']);
  });

  it('a retry check that finds no served record and no earlier attempt is a stray: it launches nothing', () => {
    const check = m('check', true);
    const t = triageByRecord([check], admission({}), []);
    expect(names(t.strays)).toEqual(['check']);
    expect(t.proceed).toEqual([]);
  });

  it('a retry check whose record could not be read is unread, not a stray', () => {
    const check = m('check', true);
    const t = triageByRecord([check], admission({ unrecorded: [check] }), []);
    expect(names(t.unread)).toEqual(['check']);
    expect(t.strays).toEqual([]);
    expect(t.proceed).toEqual([]);
  });

  it('a later receive of a retry (its record names superseded instances) proceeds', () => {
    const check = m('check', true);
    const t = triageByRecord([check], admission({ superseded: [check] }), []);
    expect(names(t.proceed)).toEqual(['check']);
    expect(t.strays).toEqual([]);
  });

  it('a retry check with a served record goes to the retry check, and one another delivery holds is dropped: neither is a stray', () => {
    const [served, dropped] = [m('served', true), m('dropped', true)];
    const t = triageByRecord([served, dropped], admission({ served: [served], dropped: [dropped] }), []);
    expect(t).toEqual({ proceed: [], strays: [], unread: [] });
  });

  it('a taken-over retry check that is no longer queued is still a stray (its fresh record is released)', () => {
    const check = m('check', true);
    const t = triageByRecord([check], admission({}), [check]);
    expect(names(t.strays)).toEqual(['check']);
    expect(t.proceed).toEqual([]);
  });
});
