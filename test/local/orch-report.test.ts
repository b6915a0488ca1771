import { describe, expect, it } from 'vitest';
import { buildFleetConfig, CREATED_BY, runnerName, tagKeys, WARM_STANDBY_VALUE, GitLabRunnerType, Provider } from '../../lambdas/shared/contract';
import type { LocalEvent } from '../../local/events';
import { buildFailSafe, buildReport, findLeftovers, formatReport, type ObservedInstance, type ObservedWorld, type ScenarioJob } from '../../local/report';

const prefix = 'rep';
const keys = tagKeys(prefix);
const config = buildFleetConfig({
  prefix,
  github: { appId: '1', organization: 'acme' },
  gitlab: { url: 'http://127.0.0.1:1', runnerType: GitLabRunnerType.GROUP, scopeId: 42 },
  pools: [
    { name: 'gh', provider: Provider.GITHUB, launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'], warmSize: 2 },
    { name: 'gl', provider: Provider.GITLAB, launchTemplateId: 'lt-2', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'], warmSize: 1 },
  ],
});
const targets = { gh: 2, gl: 1 };
const T0 = Date.parse('2026-11-29T20:00:00Z');

let serial = 0;
const id = () => `i-${(0xa000 + serial++).toString(16).padStart(17, '0')}`;
function parked(pool: string, over: Partial<ObservedInstance> = {}): ObservedInstance {
  return { id: id(), state: 'stopped', tags: { [keys.pool]: pool, [keys.warmStandby]: WARM_STANDBY_VALUE, [keys.createdBy]: CREATED_BY.pool }, ...over };
}
function activated(pool: string, state: string, warm: boolean): ObservedInstance {
  return {
    id: id(),
    state,
    tags: {
      [keys.pool]: pool,
      [keys.createdBy]: warm ? CREATED_BY.pool : CREATED_BY.scaleUp,
      ...(warm ? { [keys.warmStandby]: WARM_STANDBY_VALUE, [keys.activatedAt]: '2026-11-29T20:00:01Z' } : {}),
      [keys.jobId]: 'github:1',
    },
  };
}
function world(over: Partial<ObservedWorld> = {}): ObservedWorld {
  return { instances: [], parameters: [], registrations: [], ciJobs: [], deadLetters: [], targets, ...over };
}

describe('leftovers, counted from the listed world', () => {
  const full = () => [parked('gh'), parked('gh'), parked('gl')];
  it.each<[string, () => ObservedWorld, { instances: number; parameters: number; registrations: number }]>([
    ['full pools, nothing else', () => world({ instances: full() }), { instances: 0, parameters: 0, registrations: 0 }],
    ['terminated instances do not count', () => world({ instances: [...full(), activated('gh', 'terminated', true), activated('gl', 'terminated', false)] }), { instances: 0, parameters: 0, registrations: 0 }],
    ['a parked instance beyond the target', () => world({ instances: [...full(), parked('gl')] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['an activated instance still running', () => world({ instances: [...full(), activated('gh', 'running', true)] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['an activated instance stopped', () => world({ instances: [...full(), activated('gh', 'stopped', true)] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['a standby that never parked (priming)', () => world({ instances: [parked('gh'), parked('gh', { state: 'running' }), parked('gl')] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['a config parameter', () => world({ instances: full(), parameters: ['/rep/runners/config/i-0'] }), { instances: 0, parameters: 1, registrations: 0 }],
    [
      'a registration whose instance is terminated',
      () => {
        const gone = activated('gl', 'terminated', true);
        return world({ instances: [...full(), gone], registrations: [{ provider: Provider.GITLAB, id: '7', name: runnerName(prefix, gone.id, new Date(T0)) }] });
      },
      { instances: 0, parameters: 0, registrations: 1 },
    ],
    ['a registration whose name names no instance', () => world({ instances: full(), registrations: [{ provider: Provider.GITHUB, id: '8', name: 'someone-else' }] }), { instances: 0, parameters: 0, registrations: 1 }],
    [
      'a registration of a live instance is not a registration leftover (the instance is)',
      () => {
        const live = activated('gh', 'running', true);
        return world({ instances: [...full(), live], registrations: [{ provider: Provider.GITHUB, id: '9', name: runnerName(prefix, live.id, new Date(T0)) }] });
      },
      { instances: 1, parameters: 0, registrations: 0 },
    ],
    ['an instance of a pool the config lacks', () => world({ instances: [...full(), parked('other')] }), { instances: 1, parameters: 0, registrations: 0 }],
    [
      'a registration whose instance is a parked standby (never activated)',
      () => {
        const standby = parked('gh');
        return world({ instances: [standby, parked('gh'), parked('gl')], registrations: [{ provider: Provider.GITHUB, id: '10', name: runnerName(prefix, standby.id, new Date(T0)) }] });
      },
      { instances: 0, parameters: 0, registrations: 1 },
    ],
    [
      'a registration whose instance primes (running, not activated)',
      () => {
        const priming = parked('gh', { state: 'running' });
        return world({ instances: [...full(), priming], registrations: [{ provider: Provider.GITHUB, id: '12', name: runnerName(prefix, priming.id, new Date(T0)) }] });
      },
      { instances: 1, parameters: 0, registrations: 1 },
    ],
    ['an instance without the pool tag', () => world({ instances: [...full(), { id: id(), state: 'running', tags: {} }] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['an instance without any tag, stopped', () => world({ instances: [...full(), { id: id(), state: 'stopped', tags: { Name: 'x' } }] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['an untagged terminated instance does not count', () => world({ instances: [...full(), { id: id(), state: 'terminated', tags: {} }] }), { instances: 0, parameters: 0, registrations: 0 }],
    ['an activated instance shutting down', () => world({ instances: [...full(), activated('gh', 'shutting-down', true)] }), { instances: 1, parameters: 0, registrations: 0 }],
    ['an untagged instance shutting down', () => world({ instances: [...full(), { id: id(), state: 'shutting-down', tags: {} }] }), { instances: 1, parameters: 0, registrations: 0 }],
    [
      'a registration of an activated instance shutting down is not a registration leftover (the instance is)',
      () => {
        const going = activated('gl', 'shutting-down', false);
        return world({ instances: [...full(), going], registrations: [{ provider: Provider.GITLAB, id: '13', name: runnerName(prefix, going.id, new Date(T0)) }] });
      },
      { instances: 1, parameters: 0, registrations: 0 },
    ],
    ['a parameter nested below the config root', () => world({ instances: full(), parameters: ['/rep/runners/config/nested/i-0'] }), { instances: 0, parameters: 1, registrations: 0 }],
  ])('%s', (_name, make, expected) => {
    const left = findLeftovers(config, keys, make());
    expect({ instances: left.instances.length, parameters: left.parameters.length, registrations: left.registrations.length }).toEqual(expected);
  });
});

describe('the report', () => {
  const ghJob: ScenarioJob = { provider: Provider.GITHUB, ciJobId: '11', pool: 'gh', deliveredAt: T0 };
  const glJob: ScenarioJob = { provider: Provider.GITLAB, ciJobId: '22', pool: 'gl', deliveredAt: T0 };
  const lostJob: ScenarioJob = { provider: Provider.GITHUB, ciJobId: '33', pool: 'gh', deliveredAt: T0 };

  it('counts served, warm and cold from the CI servers and the instances, and joins the timeline by trace id and instance', () => {
    const warm = activated('gh', 'terminated', true);
    const cold = activated('gl', 'terminated', false);
    const other = parked('gh');
    const events: LocalEvent[] = [
      { t: T0 - 5_000, kind: 'parked', instanceId: warm.id },
      { t: T0, kind: 'webhook-received', provider: Provider.GITHUB, ciJobId: '11', detail: 202 },
      { t: T0 + 10, kind: 'queued', provider: Provider.GITHUB, ciJobId: '11', traceId: 'tr-gh', pool: 'gh' },
      { t: T0 + 100, kind: 'claimed', instanceId: warm.id, detail: 'warm' },
      { t: T0 + 200, kind: 'started', traceId: 'tr-gh', instanceId: warm.id, detail: 'warm' },
      { t: T0 + 900, kind: 'boot', instanceId: warm.id, detail: 'RUN' },
      { t: T0 + 1_000, kind: 'runner-started', traceId: 'tr-gh', instanceId: warm.id, detail: 0.8 },
      { t: T0 + 2_000, kind: 'job-done', provider: Provider.GITHUB, ciJobId: '11', runnerName: 'x' },
      { t: T0 + 2_500, kind: 'instance-gone', instanceId: warm.id },
      { t: T0 + 2_600, kind: 'instance-gone', instanceId: other.id },
      { t: T0, kind: 'queued', provider: Provider.GITLAB, ciJobId: '22', traceId: 'tr-gl', pool: 'gl' },
      { t: T0 + 300, kind: 'started', traceId: 'tr-gl', instanceId: cold.id, detail: 'cold' },
      { t: T0 + 3_000, kind: 'runner-started', traceId: 'tr-gl', instanceId: cold.id, detail: 2.5 },
      { t: T0, kind: 'queued', provider: Provider.GITHUB, ciJobId: '33', traceId: 'tr-lost', pool: 'gh' },
    ];
    const w = world({
      instances: [warm, cold, parked('gh'), other, parked('gl')],
      ciJobs: [
        { provider: Provider.GITHUB, id: '11', done: true, runnerName: runnerName(prefix, warm.id, new Date(T0)) },
        { provider: Provider.GITLAB, id: '22', done: true, runnerName: runnerName(prefix, cold.id, new Date(T0)) },
        { provider: Provider.GITHUB, id: '33', done: false },
      ],
      deadLetters: [{ traceId: 'tr-lost', jobId: 'github:33', reason: 'max-wait' }],
    });
    const r = buildReport({ config, jobs: [ghJob, glJob, lostJob], events, world: w, startedAt: T0 - 10_000, endedAt: T0 + 5_000 });
    expect(r).toMatchObject({ jobs: 3, served: 2, warm: 1, cold: 1, unserved: 1, deadLettered: 1, leftovers: 0, wallSeconds: 15 });
    expect(r.activationLatencySeconds).toEqual({ min: 0.8, median: 0.8, max: 2.5 });
    const gh = r.timeline[0]!;
    expect(gh).toMatchObject({ traceId: 'tr-gh', served: 'warm', instanceId: warm.id, activationLatencySeconds: 0.8 });
    // The priming history before the delivery and another instance's end are not this job's.
    expect(gh.timeline.map((e) => e.kind)).toEqual(['webhook-received', 'queued', 'claimed', 'started', 'boot', 'runner-started', 'job-done', 'instance-gone']);
    expect(gh.timeline.map((e) => e.at)).toEqual([0, 0.01, 0.1, 0.2, 0.9, 1, 2, 2.5]);
    expect(r.timeline[2]).toMatchObject({ deadLettered: 'max-wait' });
    // Dead-lettered by the redrive (no log line said so): the listing puts it on the timeline.
    expect(r.timeline[2]!.timeline.at(-1)).toEqual({ at: 5, kind: 'dead-lettered', detail: 'max-wait (found in the dead-letter queue at the end)' });
    expect(r.timeline[2]!.served).toBeUndefined();
    const text = formatReport(r);
    expect(text).toContain('jobs 3: served 2 (warm 1, cold 1), unserved 1, dead-lettered 1');
    expect(text).toContain('DEAD-LETTERED (max-wait)');
    expect(text).toContain('leftovers: 0');
  });

  it("carries each job's latency ledger and p50/p95 per stage over the run's jobs, in the contract's order", () => {
    const stage = (traceId: string, detail: string, seconds: number, t = T0): LocalEvent => ({ t, kind: 'stage', traceId, detail, seconds });
    const events: LocalEvent[] = [
      { t: T0 + 10, kind: 'queued', provider: Provider.GITHUB, ciJobId: '11', traceId: 'tr-gh', pool: 'gh' },
      { t: T0 + 10, kind: 'queued', provider: Provider.GITLAB, ciJobId: '22', traceId: 'tr-gl', pool: 'gl' },
      stage('tr-gh', 'received', 0),
      stage('tr-gh', 'queued', 0.2),
      stage('tr-gh', 'boot-began', 1.5),
      stage('tr-gl', 'queued', 0.4),
      stage('tr-gl', 'boot-began', 30.5),
      // A second line of a stage (a redelivery) does not replace the first.
      stage('tr-gh', 'queued', 9),
      // The provider's job start, on a line that carries the job id (another delivery's trace).
      { t: T0, kind: 'stage', provider: Provider.GITLAB, ciJobId: '22', traceId: 'tr-other', detail: 'job-started', seconds: 41 },
    ];
    const r = buildReport({ config, jobs: [ghJob, glJob, lostJob], events, world: world({ instances: [parked('gh'), parked('gh'), parked('gl')] }), startedAt: T0, endedAt: T0 + 5_000 });
    expect(r.timeline.map((j) => j.ledger)).toEqual([{ received: 0, queued: 0.2, 'boot-began': 1.5 }, { queued: 0.4, 'boot-began': 30.5, 'job-started': 41 }, undefined]);
    expect(r.ledger).toEqual({
      received: { jobs: 1, p50: 0, p95: 0 },
      queued: { jobs: 2, p50: 0.2, p95: 0.4 },
      'boot-began': { jobs: 2, p50: 1.5, p95: 30.5 },
      'job-started': { jobs: 1, p50: 41, p95: 41 },
    });
    expect(Object.keys(r.ledger!)).toEqual(['received', 'queued', 'boot-began', 'job-started']);
    // Stage lines are the ledger's, not the timeline's.
    expect(r.timeline[0]!.timeline.map((e) => e.kind)).toEqual(['queued']);
    const text = formatReport(r, { timelines: false });
    expect(text).toContain('latency ledger');
    expect(text).toMatch(/boot-began\s+p50\s+1\.500\s+p95\s+30\.500\s+\(2 jobs\)/);
  });

  it('a job its runner never finished is unserved even if an instance was started for it', () => {
    const i = activated('gh', 'running', true);
    const r = buildReport({
      config,
      jobs: [ghJob],
      events: [
        { t: T0, kind: 'queued', provider: Provider.GITHUB, ciJobId: '11', traceId: 'tr' },
        { t: T0, kind: 'started', traceId: 'tr', instanceId: i.id, detail: 'warm' },
      ],
      world: world({ instances: [i, parked('gh'), parked('gh'), parked('gl')], ciJobs: [{ provider: Provider.GITHUB, id: '11', done: false }] }),
      startedAt: T0,
      endedAt: T0,
    });
    expect(r).toMatchObject({ served: 0, unserved: 1, leftovers: 1 });
    expect(formatReport(r)).toContain('NOT SERVED');
  });

  it('a job its runner was lost on is failed at the CI server, not served', () => {
    const i = activated('gh', 'terminated', true);
    const r = buildReport({
      config,
      jobs: [ghJob],
      events: [{ t: T0, kind: 'queued', provider: Provider.GITHUB, ciJobId: '11', traceId: 'tr' }],
      world: world({
        instances: [i, parked('gh'), parked('gh'), parked('gl')],
        ciJobs: [{ provider: Provider.GITHUB, id: '11', done: false, failed: true, runnerName: runnerName(prefix, i.id, new Date(T0)) }],
      }),
      startedAt: T0,
      endedAt: T0,
    });
    expect(r).toMatchObject({ served: 0, unserved: 1, leftovers: 0 });
    expect(r.timeline[0]).toMatchObject({ failedAtCi: true, instanceId: i.id });
    expect(formatReport(r)).toContain(`FAILED at the CI server (its runner was lost on ${i.id})`);
  });

  it('a GitLab job that ran on another activation: warm or cold and the instance come from where it ran (job-done), after scale-down deleted the runner', () => {
    // Scale-up activated parked instance A for the job; the GitLab server handed the job to the
    // runner of cold instance B (launched for another job). B's registration is gone by the end.
    const a = activated('gl', 'terminated', true);
    const b = activated('gl', 'terminated', false);
    const ranOn = runnerName(prefix, b.id, new Date(T0));
    const r = buildReport({
      config,
      jobs: [glJob],
      events: [
        { t: T0, kind: 'queued', provider: Provider.GITLAB, ciJobId: '22', traceId: 'tr-gl', pool: 'gl' },
        { t: T0 + 100, kind: 'started', traceId: 'tr-gl', instanceId: a.id, detail: 'warm' },
        { t: T0 + 150, kind: 'started', traceId: 'tr-other', instanceId: b.id, detail: 'cold' },
        { t: T0 + 2_000, kind: 'job-done', provider: Provider.GITLAB, ciJobId: '22', runnerName: ranOn },
      ],
      world: world({ instances: [a, b, parked('gh'), parked('gh'), parked('gl')], ciJobs: [{ provider: Provider.GITLAB, id: '22', done: true }] }),
      startedAt: T0,
      endedAt: T0 + 3_000,
    });
    expect(r.timeline[0]).toMatchObject({ served: 'cold', instanceId: b.id });
    expect(r).toMatchObject({ warm: 0, cold: 1 });
    const text = formatReport(r);
    expect(text).toContain(`served cold on ${b.id}`);
    expect(text).toContain(`ran on ${b.id}`);
    expect(text).not.toContain(`on ${a.id}`);
  });

  it('warm or cold without the instance in the listing: from the started event of the instance it ran on', () => {
    const b = activated('gl', 'terminated', false);
    const r = buildReport({
      config,
      jobs: [glJob],
      events: [
        { t: T0, kind: 'queued', provider: Provider.GITLAB, ciJobId: '22', traceId: 'tr-gl', pool: 'gl' },
        { t: T0 + 100, kind: 'started', traceId: 'tr-gl', instanceId: 'i-0aaaaaaaaaaaaaaaa', detail: 'warm' },
        { t: T0 + 150, kind: 'started', traceId: 'tr-other', instanceId: b.id, detail: 'cold' },
        { t: T0 + 2_000, kind: 'job-done', provider: Provider.GITLAB, ciJobId: '22', runnerName: runnerName(prefix, b.id, new Date(T0)) },
      ],
      world: world({ instances: [parked('gh'), parked('gh'), parked('gl')], ciJobs: [{ provider: Provider.GITLAB, id: '22', done: true }] }),
      startedAt: T0,
      endedAt: T0 + 3_000,
    });
    expect(r.timeline[0]).toMatchObject({ served: 'cold', instanceId: b.id });
  });
});

describe('buildFailSafe: a fleet that cannot install its runner', () => {
  const failedStandby = (pool: string): ObservedInstance => ({ ...parked(pool), state: 'terminated' });
  const bootFailed = (instanceId: string): LocalEvent => ({ t: T0, kind: 'boot-failed', instanceId, detail: 'SHA-256 of http://127.0.0.1:1/x is a, the pin says b' });
  const standbys = [failedStandby('gh'), failedStandby('gh'), failedStandby('gl')];
  const events = standbys.map((i) => bootFailed(i.id));
  const waiting = { job: 'github:1', provider: 'github', ciJobId: '1', pool: 'gh', timeline: [] };
  const ciJobs = [{ provider: 'github', id: '1', done: false }];
  const input = (over: Partial<Parameters<typeof buildFailSafe>[0]> = {}) =>
    buildFailSafe({ config, world: world({ instances: standbys, ciJobs }), events, jobs: [waiting], primeBackoff: { gh: 1, gl: 1 }, spanSeconds: 900, ...over });

  it('passes when every pool backs off within its bound, no runner ran and every job waits or was dead-lettered', () => {
    const f = input();
    expect(f).toMatchObject({ passed: true, failures: [], runnersStarted: 0, jobsTaken: 0, jobsWaiting: ['github:1'], jobsHeld: [], jobsDeadLettered: [], coldLaunches: 0, coldRefused: 0 });
    // limit 3 + ceil(900 s / the 3600 s cap)
    expect(f.pools).toEqual({
      gh: { launches: 2, standbys: 2, coldLaunches: 0, bound: 4, failedPrimes: 2, primeBackoff: 1 },
      gl: { launches: 1, standbys: 1, coldLaunches: 0, bound: 4, failedPrimes: 1, primeBackoff: 1 },
    });
    expect(f.reasons).toEqual(['SHA-256 of http://127.0.0.1:1/x is a, the pin says b']);
  });

  it('fails on a pool not backing off, launches above the bound, a runner, a taken job or a job that neither waits nor was dead-lettered', () => {
    expect(input({ primeBackoff: { gh: 1 } }).failures).toEqual(['gl: PrimeBackoff 0, not 1']);
    const many = Array.from({ length: 5 }, () => failedStandby('gh'));
    expect(input({ world: world({ instances: many, ciJobs }) }).failures).toEqual(['gh: 5 launches (5 standbys, 0 cold), above the bound of 4']);
    expect(input({ events: [...events, { t: T0, kind: 'runner-started', instanceId: 'i-x' }] }).failures).toEqual(['1 runner(s) started']);
    expect(input({ world: world({ instances: standbys, ciJobs: [{ provider: 'github', id: '1', done: false, runnerName: 'r' }] }) }).failures).toEqual(['1 CI job(s) taken by a runner']);
    expect(input({ world: world({ instances: standbys, ciJobs: [] }) }).passed).toBe(false);
    expect(input({ jobs: [{ ...waiting, deadLettered: 'redrive' }], world: world({ instances: standbys, ciJobs: [] }) })).toMatchObject({ passed: true, jobsDeadLettered: ['github:1'] });
  });

  const coldLaunch = (state: string): ObservedInstance => ({ id: id(), state, tags: { [keys.pool]: 'gh', [keys.createdBy]: CREATED_BY.scaleUp, [keys.jobId]: 'github:1' } });

  it('counts cold launches in the pool\'s launches and checks that each refused its download and is gone', () => {
    const probe = coldLaunch('terminated');
    const f = input({ world: world({ instances: [...standbys, probe], ciJobs }), events: [...events, bootFailed(probe.id)] });
    expect(f).toMatchObject({ passed: true, coldLaunches: 1, coldRefused: 1 });
    expect(f.pools.gh).toMatchObject({ launches: 3, standbys: 2, coldLaunches: 1 });
    expect(formatReport({ ...buildReport({ config, jobs: [], events: [], world: world(), startedAt: T0, endedAt: T0 }), failSafe: f })).toContain('3 launch(es) (2 standby, 1 cold) within the back-off bound of 4');

    const silent = coldLaunch('terminated');
    expect(input({ world: world({ instances: [...standbys, silent], ciJobs }) }).failures).toEqual([`gh: cold launch ${silent.id} did not report a refused download`]);
    const running = coldLaunch('running');
    expect(input({ world: world({ instances: [...standbys, running], ciJobs }), events: [...events, bootFailed(running.id)] })).toMatchObject({
      coldRefused: 0,
      failures: [`gh: cold launch ${running.id} is running, not terminated`],
    });
    // Cold launches count against the same bound as standbys: 2 standbys + 3 cold > 4.
    const many = [coldLaunch('terminated'), coldLaunch('terminated'), coldLaunch('terminated')];
    expect(input({ world: world({ instances: [...standbys, ...many], ciJobs }), events: [...events, ...many.map((i) => bootFailed(i.id))] }).failures).toEqual([
      'gh: 5 launches (2 standbys, 3 cold), above the bound of 4',
    ]);
  });

  it('names the waiting jobs the prime back-off holds, and why', () => {
    const why = "the pool's prime back-off holds cold launches (backoff), job waits";
    const heldJob = { ...waiting, timeline: [{ at: 0.1, kind: 'queued' as const }, { at: 0.2, kind: 'held' as const, detail: why }] };
    const f = input({ jobs: [heldJob] });
    expect(f).toMatchObject({ passed: true, jobsWaiting: ['github:1'], jobsHeld: ['github:1'], heldWhy: [why] });
    // A later probe launch for it: the job is no longer held.
    const probed = { ...heldJob, timeline: [...heldJob.timeline, { at: 5, kind: 'started' as const, detail: 'cold' }] };
    expect(input({ jobs: [probed] })).toMatchObject({ jobsHeld: [], heldWhy: [] });
    const text = formatReport({ ...buildReport({ config, jobs: [], events: [], world: world(), startedAt: T0, endedAt: T0 }), failSafe: f });
    expect(text).toContain('held by the prime back-off: 1 of the waiting jobs (github:1)');
    expect(text).toContain(`held because: ${why}`);
  });
});
