import { describe, expect, it } from 'vitest';
import { planSweep } from '../../lambdas/scale-down/sweep';
import { runnerName, Provider, type RunnerSummary } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import type { ObservedParameter } from '../../lambdas/shared/parameters';
import { fleetConfig, KEYS, PREFIX, standbyTags } from '../support/fixtures';

const NOW = new Date('2026-11-29T12:00:00.000Z');
const ago = (min: number) => new Date(NOW.getTime() - min * 60_000);
const config = fleetConfig({ idleTimeoutSeconds: 1800 });
let serial = 0;
const id = () => `i-${(++serial).toString(16).padStart(17, '0')}`;
/** A first idle reading three minutes ago: past the default 2-minute confirmation window. */
const confirmed = () => ({ [KEYS.idleSince]: ago(3).toISOString() });

function activated(state: string, minutes: number, runnerId: string | undefined, extra: Record<string, string> = {}): ObservedInstance {
  const tags: Record<string, string> = { ...standbyTags(), [KEYS.activatedAt]: ago(minutes).toISOString(), [KEYS.jobId]: 'github:1', ...extra };
  if (runnerId) tags[KEYS.runnerId] = runnerId;
  return { id: id(), state, launchTime: ago(minutes), tags: new Map(Object.entries(tags)) };
}
const runner = (i: ObservedInstance, runnerId: string, status: string, busy: boolean | undefined, minutes = 60): RunnerSummary => ({
  runnerId,
  name: runnerName(PREFIX, i.id, ago(minutes)),
  status,
  ...(busy === undefined ? {} : { busy }),
});

describe('planSweep: instances', () => {
  type Row = [string, ObservedInstance, (i: ObservedInstance) => RunnerSummary[] | undefined, string | undefined, boolean?];
  const rows: Row[] = [
    ['runner gone at the provider: job finished', activated('running', 20, '7'), () => [], 'job-finished'],
    ['activated instance powered off', activated('stopped', 20, '7'), () => [], 'job-finished'],
    ['idle past the idle timeout, confirmed by an earlier reading', activated('running', 31, '7', confirmed()), (i) => [runner(i, '7', 'online', false)], 'idle'],
    ['idle past the idle timeout, first reading: not yet', activated('running', 31, '7'), (i) => [runner(i, '7', 'online', false)], undefined],
    ['idle but within the idle timeout', activated('running', 29, '7'), (i) => [runner(i, '7', 'online', false)], undefined],
    ['busy, however old', activated('running', 600, '7'), (i) => [runner(i, '7', 'online', true)], undefined],
    ['busy and stopped (never while it may work)', activated('stopped', 600, '7'), (i) => [runner(i, '7', 'online', true)], undefined],
    ['busy unknown and online: not idle', activated('running', 600, '7'), (i) => [runner(i, '7', 'online', undefined)], undefined],
    ['busy unknown and offline past the timeout, confirmed', activated('running', 31, '7', confirmed()), (i) => [runner(i, '7', 'offline', undefined)], 'idle'],
    ['no runner id after the grace period', activated('running', 11, undefined), () => [], 'no-runner'],
    ['no runner id within the grace period', activated('running', 9, undefined), () => [], undefined],
    ['runner gone but within the grace period', activated('running', 5, '7'), () => [], undefined],
    ['provider list unknown: nothing decided from it', activated('running', 600, '7'), () => undefined, undefined],
    ['provider list unknown, but powered off', activated('stopped', 600, '7'), () => undefined, 'job-finished'],
    ['list cut at the page cap: a missing runner says nothing', activated('running', 600, '7'), () => [], undefined, true],
    ['list cut at the page cap, but powered off', activated('stopped', 600, '7'), () => [], 'job-finished', true],
    ['list cut at the page cap, a listed idle runner still goes', activated('running', 31, '7', confirmed()), (i) => [runner(i, '7', 'online', false)], 'idle', true],
    ['instance reported its job started (within the max job duration): not idle, however the readings agree', activated('running', 600, '7', { ...confirmed(), [KEYS.jobStarted]: ago(300).toISOString() }), (i) => [runner(i, '7', 'online', false)], undefined],
    ['instance reported its job started, runner gone: job finished', activated('running', 600, '7', { [KEYS.jobStarted]: ago(500).toISOString() }), () => [], 'job-finished'],
    ['instance reported its job started and powered off: job finished', activated('stopped', 600, '7', { [KEYS.jobStarted]: ago(500).toISOString() }), (i) => [runner(i, '7', 'offline', false)], 'job-finished'],
  ];
  it.each(rows)('%s', (_name, instance, list, reason, partial = false) => {
    const l = list(instance);
    const runners = new Map(l === undefined ? [] : [[Provider.GITHUB, l]]);
    const plan = planSweep(config, KEYS, [instance], [], runners, NOW, undefined, new Set(partial ? [Provider.GITHUB] : []));
    expect(plan.terminate.map((t) => t.reason)).toEqual(reason ? [reason] : []);
  });

  it('never touches an unactivated standby', () => {
    const parked: ObservedInstance = { id: id(), state: 'stopped', launchTime: ago(6000), tags: new Map(Object.entries(standbyTags())) };
    expect(planSweep(config, KEYS, [parked], [], new Map([[Provider.GITHUB, []]]), NOW).terminate).toEqual([]);
  });

  it('deregisters the runner of an idle instance with it', () => {
    const i = activated('running', 31, '7', confirmed());
    const plan = planSweep(config, KEYS, [i], [], new Map([[Provider.GITHUB, [runner(i, '7', 'online', false)]]]), NOW);
    expect(plan.terminate[0]!.runner).toEqual({ provider: Provider.GITHUB, runnerId: '7' });
  });
});

describe('planSweep: two idle readings a window apart', () => {
  const idleList = (i: ObservedInstance) => new Map([[Provider.GITHUB, [runner(i, '7', 'online', false)]]]);
  const marks = (i: ObservedInstance, list: RunnerSummary[], cfg = config) => {
    const plan = planSweep(cfg, KEYS, [i], [], new Map([[Provider.GITHUB, list]]), NOW);
    return { terminate: plan.terminate.map((t) => t.reason), mark: plan.markIdle.map((x) => x.id), clear: plan.clearIdle.map((x) => x.id) };
  };

  type Row = [string, Record<string, string>, boolean | undefined, string, { terminate: string[]; mark: boolean; clear: boolean }];
  const rows: Row[] = [
    ['first idle reading: marked, nothing reclaimed', {}, false, 'online', { terminate: [], mark: true, clear: false }],
    ['second idle reading within the window: waits', { [KEYS.idleSince]: ago(1).toISOString() }, false, 'online', { terminate: [], mark: false, clear: false }],
    ['second idle reading past the window: idle', { [KEYS.idleSince]: ago(2).toISOString() }, false, 'online', { terminate: ['idle'], mark: false, clear: false }],
    ['a mark from before this activation is no reading: marked anew', { [KEYS.idleSince]: ago(40).toISOString() }, false, 'online', { terminate: [], mark: true, clear: false }],
    ['an unreadable mark: marked anew', { [KEYS.idleSince]: 'yesterday' }, false, 'online', { terminate: [], mark: true, clear: false }],
    ['busy reading after an idle one: mark cleared', { [KEYS.idleSince]: ago(5).toISOString() }, true, 'online', { terminate: [], mark: false, clear: true }],
    ['no busy flag and online after an idle reading: mark cleared', { [KEYS.idleSince]: ago(5).toISOString() }, undefined, 'online', { terminate: [], mark: false, clear: true }],
    ['job started on the instance: mark cleared, never reclaimed', { [KEYS.idleSince]: ago(5).toISOString(), [KEYS.jobStarted]: ago(20).toISOString() }, false, 'online', { terminate: [], mark: false, clear: true }],
    ['job started on the instance, first idle reading: not even marked', { [KEYS.jobStarted]: ago(20).toISOString() }, false, 'offline', { terminate: [], mark: false, clear: false }],
  ];
  it.each(rows)('%s', (_name, tags, busy, status, want) => {
    const i = activated('running', 31, '7', tags);
    const got = marks(i, [runner(i, '7', status, busy)]);
    expect(got).toEqual({ terminate: want.terminate, mark: want.mark ? [i.id] : [], clear: want.clear ? [i.id] : [] });
  });

  // One list read without the runner is not enough while the instance's job-started report is fresh.
  type UnlistedRow = [string, Record<string, string>, { terminate: string[]; mark: boolean }];
  const unlisted: UnlistedRow[] = [
    ['unlisted once, job started 5 min ago: kept, marked', { [KEYS.jobStarted]: ago(5).toISOString() }, { terminate: [], mark: true }],
    ['unlisted again within the window: kept', { [KEYS.jobStarted]: ago(5).toISOString(), [KEYS.idleSince]: ago(1).toISOString() }, { terminate: [], mark: false }],
    ['unlisted again a window later: reclaimed, job finished', { [KEYS.jobStarted]: ago(5).toISOString(), [KEYS.idleSince]: ago(2).toISOString() }, { terminate: ['job-finished'], mark: false }],
    ['unlisted, a mark from before this activation: marked anew', { [KEYS.jobStarted]: ago(5).toISOString(), [KEYS.idleSince]: ago(40).toISOString() }, { terminate: [], mark: true }],
    ['unlisted, no job-started report: job finished at once', {}, { terminate: ['job-finished'], mark: false }],
    // An idle mark from before the job started reads the idle runner, not the unlisted one:
    // with it a single unlisted reading would end a job that started a minute ago.
    ['unlisted once, idle mark from before the job started: kept, marked anew', { [KEYS.jobStarted]: ago(1).toISOString(), [KEYS.idleSince]: ago(3).toISOString() }, { terminate: [], mark: true }],
  ];
  it.each(unlisted)('%s', (_name, tags, want) => {
    const i = activated('running', 31, '7', tags);
    const got = marks(i, []);
    expect(got).toEqual({ terminate: want.terminate, mark: want.mark ? [i.id] : [], clear: [] });
  });

  it('a job-started report rewritten after the job (the job can write it) keeps an unlisted runner\'s instance for at most the max job duration from the activation', () => {
    // Activated 7 h ago (past the 6 h default), the report rewritten a minute ago, a mark 3 min old:
    // the mark counts again, so a process that outlived the job cannot re-mark the instance forever.
    const i = activated('running', 7 * 60, '7', { [KEYS.jobStarted]: ago(1).toISOString(), [KEYS.idleSince]: ago(3).toISOString() });
    expect(marks(i, [])).toEqual({ terminate: ['job-finished'], mark: [], clear: [] });
  });

  it('a runner unlisted once then listed busy: the mark is cleared, the job goes on', () => {
    const i = activated('running', 31, '7', { [KEYS.jobStarted]: ago(5).toISOString(), [KEYS.idleSince]: ago(3).toISOString() });
    expect(marks(i, [runner(i, '7', 'online', true)])).toEqual({ terminate: [], mark: [], clear: [i.id] });
  });

  it('the job-started report holds for the max job duration (default 6 h), then the readings decide again', () => {
    // An instance that outlived its job (self-termination failed, rebooted mid-job, a GitLab
    // registration that stays listed offline) must not be kept forever.
    const at = (jobStarted: string) => activated('running', 600, '7', { ...confirmed(), [KEYS.jobStarted]: jobStarted });
    const reasons = (i: ObservedInstance, cfg = config) => planSweep(cfg, KEYS, [i], [], idleList(i), NOW).terminate.map((t) => t.reason);
    expect(reasons(at(ago(359).toISOString()))).toEqual([]);
    expect(reasons(at(ago(361).toISOString()))).toEqual(['idle']);
    expect(reasons(at(ago(361).toISOString()), fleetConfig({ idleTimeoutSeconds: 1800, maxJobSeconds: 8 * 3600 }))).toEqual([]);
    // Written by the job itself, a time in the future or unreadable counts from the activation.
    expect(reasons(at(new Date(NOW.getTime() + 100 * 86_400_000).toISOString()))).toEqual(['idle']);
    expect(reasons(at('soon'))).toEqual(['idle']);
    expect(reasons(activated('running', 300, '7', { ...confirmed(), [KEYS.jobStarted]: 'soon' }))).toEqual([]);
  });

  it('takes the window from the pool (idleConfirmSeconds)', () => {
    const i = activated('running', 31, '7', { [KEYS.idleSince]: ago(3).toISOString() });
    const long = fleetConfig({ idleTimeoutSeconds: 1800, idleConfirmSeconds: 600 });
    expect(planSweep(long, KEYS, [i], [], idleList(i), NOW).terminate).toEqual([]);
    expect(planSweep(config, KEYS, [i], [], idleList(i), NOW).terminate.map((t) => t.reason)).toEqual(['idle']);
  });

  it('a stale busy:false alone never reclaims: the first reading only marks', () => {
    // What GitHub was seen to answer mid-job: busy false once. Without a second reading a
    // window later (and with the instance's job-started report), nothing is deregistered.
    const i = activated('running', 600, '7');
    expect(marks(i, [runner(i, '7', 'online', false)]).terminate).toEqual([]);
  });
});

describe('planSweep: parameters and registrations', () => {
  const param = (instanceId: string, minutes: number): ObservedParameter => ({ name: `/test/runners/config/${instanceId}`, instanceId, lastModified: ago(minutes) });
  const parked: ObservedInstance = { id: id(), state: 'stopped', launchTime: ago(100), tags: new Map(Object.entries(standbyTags())) };
  const running = activated('running', 5, '7');

  it.each([
    ['instance gone', param('i-00000000000000abc', 2), [], 'instance-gone'],
    ['instance gone, written within the last minute', param('i-00000000000000abc', 0.5), [], undefined],
    ['claim on a parked instance older than the grace period', param(parked.id, 11), [parked], 'stale-claim'],
    ['claim on a parked instance within the grace period', param(parked.id, 9), [parked], undefined],
    ['config of an activated instance', param(running.id, 60), [running], undefined],
  ] as [string, ObservedParameter, ObservedInstance[], string | undefined][])('%s', (_name, p, instances, reason) => {
    expect(planSweep(config, KEYS, instances, [p], new Map(), NOW).deleteParameters.map((d) => d.reason)).toEqual(reason ? [reason] : []);
  });

  it('deregisters runners without an instance, or whose instance carries another runner, after the grace period', () => {
    const gone: RunnerSummary = { runnerId: '1', name: runnerName(PREFIX, 'i-00000000000000abc', ago(20)), status: 'offline' };
    const lostClaim: RunnerSummary = { runnerId: '2', name: runnerName(PREFIX, running.id, ago(20)), status: 'offline' };
    const own: RunnerSummary = { runnerId: '7', name: runnerName(PREFIX, running.id, ago(20)), status: 'online', busy: true };
    const young: RunnerSummary = { runnerId: '3', name: runnerName(PREFIX, 'i-00000000000000abc', ago(1)), status: 'offline' };
    const foreign: RunnerSummary = { runnerId: '4', name: 'someone-elses-runner', status: 'offline' };
    const busyOrphan: RunnerSummary = { runnerId: '5', name: runnerName(PREFIX, 'i-00000000000000abc', ago(20)), status: 'online', busy: true };
    const plan = planSweep(config, KEYS, [running], [], new Map([[Provider.GITHUB, [gone, lostClaim, own, young, foreign, busyOrphan]]]), NOW);
    expect(plan.deleteRunners.map((d) => d.runner.runnerId)).toEqual(['1', '2']);
  });
});

describe('planSweep: a registration carried past a refused claim', () => {
  it('keeps a runner named after the instance of its refused claim while another live instance carries its id; deletes it once none does', () => {
    // Scale-up registered runner 8 for `parked`, lost that claim, and started `carrier` with it.
    const parked: ObservedInstance = { id: id(), state: 'stopped', launchTime: ago(60), tags: new Map(Object.entries(standbyTags())) };
    const carrier = activated('running', 20, '8');
    const carried: RunnerSummary = { runnerId: '8', name: runnerName(PREFIX, parked.id, ago(20)), status: 'online', busy: false };
    const runners = new Map([[Provider.GITHUB, [carried]]]);
    expect(planSweep(config, KEYS, [parked, carrier], [], runners, NOW).deleteRunners).toEqual([]);
    // The same id on an instance of another provider's pool is not this runner's instance.
    expect(planSweep(config, KEYS, [parked, carrier], [], new Map([[Provider.GITLAB, [carried]]]), NOW).deleteRunners.map((d) => d.runner.runnerId)).toEqual(['8']);
    expect(planSweep(config, KEYS, [parked], [], runners, NOW).deleteRunners.map((d) => d.runner.runnerId)).toEqual(['8']);
  });
});

describe('planSweep: a runner whose instance belongs to a pool the config no longer names', () => {
  it('keeps it while the instance lives (it may be mid-job; the provider says busy only sometimes), for either provider', () => {
    // The pool was renamed or removed by a deploy while this instance ran its job.
    const working = activated('running', 20, '9', { [KEYS.pool]: 'retired' });
    const gitlab = runner(working, '9', 'online', undefined, 20);
    const github = runner(working, '9', 'online', false, 20);
    expect(planSweep(config, KEYS, [working], [], new Map([[Provider.GITLAB, [gitlab]]]), NOW).deleteRunners).toEqual([]);
    expect(planSweep(config, KEYS, [working], [], new Map([[Provider.GITHUB, [github]]]), NOW).deleteRunners).toEqual([]);
    // Once the instance is gone, the registration is an orphan.
    expect(planSweep(config, KEYS, [], [], new Map([[Provider.GITLAB, [gitlab]]]), NOW).deleteRunners.map((d) => d.runner.runnerId)).toEqual(['9']);
  });
});
