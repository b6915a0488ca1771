import { describe, expect, it } from 'vitest';
import { planSweep } from '../../lambdas/scale-down/sweep';
import { encodeParking, runnerName, Provider, REUSE_DEFAULTS, type RunnerSummary } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { IDLE_STOP_LEFTOVER_MS, idleStopMarker, type ObservedParameter } from '../../lambdas/shared/parameters';
import { fleetConfig, KEYS, PREFIX, standbyTags } from '../support/fixtures';

// The sweep's plan for reusable pools (contract reuse.ts, design items 5 and 6): idle-stop
// instead of terminate, the parking window, and signals of earlier activations ignored (R3).
const NOW = new Date('2026-11-29T12:00:00.000Z');
const ago = (min: number) => new Date(NOW.getTime() - min * 60_000);
const reusable = fleetConfig({ idleTimeoutSeconds: 1800, reuse: { maxJobs: 5, cacheDirectories: ['/var/cache/ci'] } });
const plain = fleetConfig({ idleTimeoutSeconds: 1800 });
let serial = 0;
const id = () => `i-${(++serial).toString(16).padStart(17, '0')}`;
const confirmed = () => ({ [KEYS.idleSince]: ago(3).toISOString() });
const parkSeconds = REUSE_DEFAULTS.parkSeconds;

function activated(state: string, minutes: number, extra: Record<string, string> = {}): ObservedInstance {
  const tags = { ...standbyTags(), [KEYS.activatedAt]: ago(minutes).toISOString(), [KEYS.jobId]: 'github:1', [KEYS.runnerId]: '7', ...extra };
  return { id: id(), state, launchTime: ago(minutes), tags: new Map(Object.entries(tags)) };
}
const runner = (i: ObservedInstance, busy: boolean): RunnerSummary => ({ runnerId: '7', name: runnerName(PREFIX, i.id, ago(60)), status: 'online', busy });
const listed = (i: ObservedInstance, busy = false) => new Map([[Provider.GITHUB, [runner(i, busy)]]]);
const unlisted = () => new Map([[Provider.GITHUB, [] as RunnerSummary[]]]);
/** The `parking` tag of the instance's own activation, since `min` minutes ago. */
const parkingOf = (i: ObservedInstance, min: number) => encodeParking(i.tags.get(KEYS.activatedAt)!, ago(min));
const withTags = (i: ObservedInstance, extra: Record<string, string>): ObservedInstance => ({ ...i, tags: new Map([...i.tags, ...Object.entries(extra)]) });

function plan(config: typeof reusable, i: ObservedInstance, runners: ReadonlyMap<Provider, readonly RunnerSummary[]>) {
  const p = planSweep(config, KEYS, [i], [], runners, NOW);
  return { terminate: p.terminate.map((t) => t.reason), idleStop: p.idleStop.map((s) => [s.instance.id, s.runner.runnerId]), mark: p.markIdle.length, clear: p.clearIdle.length };
}

describe('planSweep: idle-stop in reusable pools', () => {
  it('plans an idle-stop where the idle rule would terminate, with the runner to deregister', () => {
    const i = activated('running', 31, confirmed());
    expect(plan(reusable, i, listed(i))).toEqual({ terminate: [], idleStop: [[i.id, '7']], mark: 0, clear: 0 });
    // A pool without reuse terminates as before.
    expect(plan(plain, i, listed(i))).toMatchObject({ terminate: ['idle'], idleStop: [] });
  });

  it('never plans one for a busy runner, a first reading, or within the idle timeout', () => {
    const old = activated('running', 31, confirmed());
    expect(plan(reusable, old, listed(old, true))).toMatchObject({ terminate: [], idleStop: [] });
    const first = activated('running', 31);
    expect(plan(reusable, first, listed(first))).toMatchObject({ idleStop: [], mark: 1 });
    const young = activated('running', 29, confirmed());
    expect(plan(reusable, young, listed(young))).toMatchObject({ terminate: [], idleStop: [] });
  });

  it('an idle mark of an earlier activation is no reading of this one (R3): marked anew, not stopped', () => {
    const i = activated('running', 31, { [KEYS.idleSince]: ago(40).toISOString() });
    expect(plan(reusable, i, listed(i))).toEqual({ terminate: [], idleStop: [], mark: 1, clear: 0 });
  });

  it('a runner gone at the provider is a finished job, not an idle-stop', () => {
    expect(plan(reusable, activated('running', 31, confirmed()), unlisted())).toMatchObject({ terminate: ['job-finished'], idleStop: [] });
  });

  it('an activation that reported its job (past the max job duration) and still lists its runner idle is terminated: an anomaly, not a park', () => {
    const i = activated('running', 400, { ...confirmed(), [KEYS.jobStarted]: ago(370).toISOString() });
    expect(plan(reusable, i, listed(i))).toMatchObject({ terminate: ['idle'], idleStop: [] });
  });

  it('an instance without an activated-at tag is terminated as before (the marker and the parking tag name the activation)', () => {
    const i = activated('running', 31, confirmed());
    const bare: ObservedInstance = { ...i, tags: new Map([...i.tags].filter(([k]) => k !== KEYS.activatedAt)) };
    expect(plan(reusable, bare, listed(bare))).toMatchObject({ terminate: ['idle'], idleStop: [] });
  });
});

describe('planSweep: a job-started report of an earlier activation is ignored (R3)', () => {
  it('does not keep an idle runner: the idle rule applies', () => {
    // Before the change it counted from the activation and kept the instance for the max job duration.
    const i = activated('running', 31, { ...confirmed(), [KEYS.jobStarted]: ago(45).toISOString() });
    expect(plan(plain, i, listed(i))).toMatchObject({ terminate: ['idle'] });
    expect(plan(reusable, i, listed(i))).toMatchObject({ terminate: [], idleStop: [[i.id, '7']] });
  });

  it('makes one missing runner list a finished job at once (no second reading for a job it never ran)', () => {
    const i = activated('running', 31, { [KEYS.jobStarted]: ago(45).toISOString() });
    expect(plan(reusable, i, unlisted())).toMatchObject({ terminate: ['job-finished'], mark: 0 });
  });

  it('a report of this activation still keeps it', () => {
    const i = activated('running', 31, { ...confirmed(), [KEYS.jobStarted]: ago(20).toISOString() });
    expect(plan(reusable, i, listed(i))).toMatchObject({ terminate: [], idleStop: [], clear: 1 });
  });
});

describe('planSweep: the parking window', () => {
  type Row = [string, string, number, 'listed' | 'unlisted', string[]];
  const rows: Row[] = [
    ['parking since 1 min, runner gone: left alone', 'running', 1, 'unlisted', []],
    ['parking since 1 min, powered off: left alone', 'stopped', 1, 'unlisted', []],
    ['parking since 1 min, listed idle: left alone (no idle-stop of a parking instance)', 'running', 1, 'listed', []],
    [`parking past ${parkSeconds / 60} min: reclaimed as today`, 'running', parkSeconds / 60 + 1, 'unlisted', ['job-finished']],
    ['parking since a time far ahead of now: not honoured', 'running', -(parkSeconds / 60 + 1), 'unlisted', ['job-finished']],
    // An earlier idle-stop's deregistration failed (its parking tag stays): one idle-stop per
    // activation, then the idle rule terminates as it does without reuse, so nothing idles forever.
    [`parking past ${parkSeconds / 60} min, listed idle: terminated as idle, no second idle-stop`, 'running', parkSeconds / 60 + 1, 'listed', ['idle']],
  ];
  it.each(rows)('%s', (_name, state, sinceMin, list, expected) => {
    const base = activated(state, 40, confirmed());
    const i = withTags(base, { [KEYS.parking]: parkingOf(base, sinceMin) });
    const p = plan(reusable, i, list === 'listed' ? listed(i) : unlisted());
    expect(p.terminate).toEqual(expected);
    expect(p.idleStop).toEqual([]);
  });

  it('keeps even the no-runner rule away', () => {
    const base = activated('running', 40);
    const i: ObservedInstance = { ...base, tags: new Map([...base.tags].filter(([k]) => k !== KEYS.runnerId).concat([[KEYS.parking, parkingOf(base, 1)]])) };
    expect(plan(reusable, i, unlisted()).terminate).toEqual([]);
  });

  it('a parking tag naming another activation is ignored (R3)', () => {
    const i = activated('running', 40, { [KEYS.parking]: encodeParking(ago(90).toISOString(), ago(1)) });
    expect(plan(reusable, i, unlisted()).terminate).toEqual(['job-finished']);
    const garbled = activated('running', 40, { [KEYS.parking]: 'not a parking value' });
    expect(plan(reusable, garbled, unlisted()).terminate).toEqual(['job-finished']);
  });
});

describe('planSweep: idle-stop markers', () => {
  const marker = (instanceId: string, minutes: number): ObservedParameter => ({
    name: `/${PREFIX}/runners/config/${instanceId}`,
    instanceId,
    lastModified: ago(minutes),
    evictionMarker: false,
    idleStopMarker: true,
    markerValue: idleStopMarker(ago(60).toISOString(), 'github:1'),
  });
  const deleted = (parameters: ObservedParameter[], instances: ObservedInstance[] = []) =>
    planSweep(reusable, KEYS, instances, parameters, unlisted(), NOW).deleteParameters.map((d) => [d.parameter.instanceId, d.reason]);

  it('removes one older than the leftover bound (its sweep died), whatever the instance', () => {
    const running = activated('running', 5);
    const past = IDLE_STOP_LEFTOVER_MS / 60_000 + 1;
    expect(deleted([marker(running.id, past), marker('i-0000000000000dead', past)], [running])).toEqual([
      [running.id, 'leftover-marker'],
      ['i-0000000000000dead', 'leftover-marker'],
    ]);
  });

  it('leaves a younger one to the sweep that holds it, even on a parked or gone instance', () => {
    const parked: ObservedInstance = { id: id(), state: 'stopped', launchTime: ago(60), tags: new Map(Object.entries(standbyTags())) };
    const young = IDLE_STOP_LEFTOVER_MS / 60_000 - 1;
    expect(deleted([marker(parked.id, young), marker('i-0000000000000dead', young)], [parked])).toEqual([]);
  });
});
