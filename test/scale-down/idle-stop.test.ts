import { EC2Client } from '@aws-sdk/client-ec2';
import { PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { idleStopVerdict } from '../../lambdas/scale-down/idle-stop';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { encodeParking, parseParking, runnerName, ssmPaths, Provider } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { EVICTION_MARKER, IDLE_STOP_LEFTOVER_MS, IDLE_STOP_MARKER_PREFIX } from '../../lambdas/shared/parameters';
import { FakeCi } from '../support/fake-ci';
import { awsError, FakeAws, lostAnswer, type FakeInstance } from '../support/fake-aws';
import { fleetConfig, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

// Idle-stop (lambdas/scale-down/idle-stop.ts) through the scale-down handler, with every call
// behind aws-sdk-client-mock so that answers can be lost and calls refused.
const paths = ssmPaths(PREFIX);
const hour = 3_600_000;
let aws: FakeAws;
let ci: FakeCi;
let lines: Lines;

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  ci = new FakeCi(Provider.GITHUB, PREFIX, () => aws.now.getTime());
  lines = new Lines();
});
afterAll(() => aws.restore());

const sweepNow = () => new Date(aws.now.getTime() + hour);
function handler() {
  return createScaleDownHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => fleetConfig({ idleTimeoutSeconds: 1800, reuse: { maxJobs: 5, cacheDirectories: ['/var/cache/ci'] } }),
    providers: () => ({ github: ci }),
    now: sweepNow,
    sink: lines.sink,
  })();
}
/** An activated instance of the reusable pool whose idle runner was read idle by an earlier sweep, past the window. */
function idleInstance(extra: Record<string, string> = {}): FakeInstance {
  const i = aws.addInstance({
    state: 'running',
    tags: {
      ...standbyTags(),
      [KEYS.activatedAt]: aws.now.toISOString(),
      [KEYS.jobId]: 'github:1',
      [KEYS.runnerId]: '1',
      [KEYS.traceId]: 't-1',
      [KEYS.idleSince]: new Date(aws.now.getTime() + hour - 3 * 60_000).toISOString(),
      ...extra,
    },
  });
  ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, i.id, aws.now), status: 'online', busy: false, instanceId: i.id, jobId: 'x' });
  return i;
}
const markerPuts = () => aws.ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input);
const markerName = (i: FakeInstance) => paths.runnerConfig(i.id);

describe('idle-stop through the scale-down handler', () => {
  it('claims with a String marker (Overwrite=false) naming the activation and job, tags parking, deregisters, removes the marker, counts it', async () => {
    const i = idleInstance();
    expect(await handler()).toEqual({ terminated: 0, parametersDeleted: 0, runnersDeleted: 0, idleStopped: 1 });
    expect(i.state).toBe('running');
    expect(ci.deleted).toEqual(['1']);
    const [put] = markerPuts();
    expect(put).toMatchObject({ Name: markerName(i), Type: 'String', Overwrite: false });
    expect(put!.Value).toMatch(new RegExp(`^${IDLE_STOP_MARKER_PREFIX}[0-9a-f-]{36} activation=${aws.now.toISOString()} job=github:1$`));
    expect(parseParking(i.tags.get(KEYS.parking))).toEqual({ activatedAt: aws.now.toISOString(), since: sweepNow() });
    expect(aws.parameters.size).toBe(0);
    expect(lines.metric('IdleStops', { Pool: 'linux' })).toBe(1);
    expect(lines.metric('Sweeps', { Reason: 'idle' })).toBe(0);
    expect(lines.logs('idle-stopped').map((l) => [l.instanceId, l.runnerId, l.traceId])).toEqual([[i.id, '1', 't-1']]);
  });

  it('the next sweep leaves the instance, its runner gone, alone while it parks', async () => {
    const i = idleInstance();
    await handler();
    expect(await handler()).toMatchObject({ terminated: 0, idleStopped: 0 });
    expect(i.state).toBe('running');
  });

  it('does nothing when the config name holds a claim already (a job, an eviction, another sweep): never touches it', async () => {
    const i = idleInstance();
    aws.parameters.set(markerName(i), { value: EVICTION_MARKER, tags: {}, at: aws.now, type: 'String' });
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(i.tags.has(KEYS.parking)).toBe(false);
    expect(aws.parameters.get(markerName(i))!.value).toBe(EVICTION_MARKER);
    expect(aws.count('DeleteParameters')).toBe(0);
  });

  it('a marker write whose answer was lost but which landed is found by listing, held, and removed', async () => {
    const i = idleInstance();
    aws.fault('PutParameter', lostAnswer());
    expect(await handler()).toMatchObject({ idleStopped: 1 });
    expect(ci.deleted).toEqual(['1']);
    expect(i.tags.has(KEYS.parking)).toBe(true);
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs('idle-stop claim outcome unknown, resolved by listing').map((l) => l.held)).toEqual([true]);
  });

  it('a marker write whose answer was lost and which did not land is no claim', async () => {
    idleInstance();
    aws.fault('PutParameter', awsError('ServiceUnavailable', 503));
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(aws.parameters.size).toBe(0);
  });

  it('a lost write that cannot be listed is not acted on, and the marker it may have left is removed once listing works', async () => {
    const i = idleInstance();
    aws.fault('PutParameter', lostAnswer());
    // The handler's own listing passes; the claim's read-back is refused.
    aws.fault('GetParametersByPath', 'pass', awsError('AccessDeniedException'));
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(i.tags.has(KEYS.parking)).toBe(false);
    expect(aws.parameters.size).toBe(0);
  });

  it('a lost write that could not be listed, whose marker is someone else\'s, leaves that claim alone', async () => {
    const i = idleInstance();
    // The write did not land; a job claim (a SecureString) took the name meanwhile.
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'config', tags: {}, at: aws.now });
      throw awsError('ServiceUnavailable', 503);
    });
    aws.fault('GetParametersByPath', 'pass', awsError('AccessDeniedException'));
    await handler();
    expect(ci.deleted).toEqual([]);
    expect(aws.parameters.get(markerName(i))!.value).toBe('config');
  });

  it('re-observes after the claim: a job reported meanwhile keeps the runner, and the marker goes', async () => {
    const i = idleInstance();
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      const seen = await list();
      i.tags.set(KEYS.jobStarted, sweepNow().toISOString());
      return seen;
    };
    expect(await handler()).toMatchObject({ idleStopped: 0, terminated: 0 });
    expect(ci.deleted).toEqual([]);
    expect(i.tags.has(KEYS.parking)).toBe(false);
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs('not idle-stopping: the instance changed since the reading').map((l) => l.why)).toEqual(['job-started']);
  });

  it('a runner that took a job before the DELETE (GitHub refuses) is kept; the marker goes', async () => {
    const i = idleInstance();
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      const seen = await list();
      ci.runners.get('1')!.busy = true;
      return seen;
    };
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(i.state).toBe('running');
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs(/^keeping the instance/).map((l) => l.reason)).toEqual(['idle-stop']);
  });

  it('a thrown error (the re-observation refused) is logged and the marker goes', async () => {
    idleInstance();
    aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs('idle-stop failed; the next sweep reads the instance again')).toHaveLength(1);
  });

  it('a parking tag that cannot be written stops the idle-stop before the deregistration; the marker goes', async () => {
    const i = idleInstance();
    aws.fault('CreateTags', ...Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)));
    expect(await handler()).toMatchObject({ idleStopped: 0 });
    expect(ci.deleted).toEqual([]);
    expect(i.tags.has(KEYS.parking)).toBe(false);
    expect(aws.parameters.size).toBe(0);
  });

  it('a marker delete whose answer was lost but which happened is read back as gone, not sent again', async () => {
    idleInstance();
    aws.fault('DeleteParameters', lostAnswer());
    expect(await handler()).toMatchObject({ idleStopped: 1 });
    expect(aws.count('DeleteParameters')).toBe(1);
    expect(aws.parameters.size).toBe(0);
  });

  it('a marker delete whose answer was lost and which did not happen is tried again once the listing shows the marker is still ours', async () => {
    idleInstance();
    aws.fault('DeleteParameters', awsError('ServiceUnavailable', 503));
    expect(await handler()).toMatchObject({ idleStopped: 1 });
    expect(aws.count('DeleteParameters')).toBe(2);
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs('the idle-stop marker may be left; a later sweep removes it')).toHaveLength(0);
  });

  it('a marker whose deletes all failed is logged, and removed by a later sweep past the leftover bound', async () => {
    const i = idleInstance();
    aws.fault('DeleteParameters', awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503));
    await handler();
    expect(aws.parameters.has(markerName(i))).toBe(true);
    expect(lines.logs('the idle-stop marker may be left; a later sweep removes it')).toHaveLength(1);
    // Within the bound the next sweep leaves it: a live sweep may hold it.
    aws.parameters.get(markerName(i))!.at = new Date(sweepNow().getTime() - IDLE_STOP_LEFTOVER_MS + 60_000);
    expect(await handler()).toMatchObject({ parametersDeleted: 0 });
    aws.parameters.get(markerName(i))!.at = new Date(sweepNow().getTime() - IDLE_STOP_LEFTOVER_MS - 60_000);
    expect(await handler()).toMatchObject({ parametersDeleted: 1 });
    expect(aws.parameters.size).toBe(0);
    expect(lines.metric('Sweeps', { Reason: 'leftover-marker' })).toBe(1);
  });
});

describe('idleStopVerdict', () => {
  const planned: ObservedInstance = {
    id: 'i-00000000000000001',
    state: 'running',
    launchTime: new Date('2026-11-29T11:00:00Z'),
    tags: new Map([
      [KEYS.activatedAt, '2026-11-29T11:00:00.000Z'],
      [KEYS.runnerId, '1'],
    ]),
  };
  const now = new Date('2026-11-29T12:00:00Z');
  const fresh = (state: string, extra: [string, string][] = [], base = planned.tags): ObservedInstance => ({ ...planned, state, tags: new Map([...base, ...extra]) });
  it.each([
    ['the same idle activation', fresh('running'), { go: true }],
    ['gone', undefined, { go: false, why: 'gone' }],
    ['stopping', fresh('stopping'), { go: false, why: 'not-running' }],
    ['re-activated', fresh('running', [[KEYS.activatedAt, '2026-11-29T11:59:00.000Z']]), { go: false, why: 'other-activation' }],
    ['another runner', fresh('running', [[KEYS.runnerId, '2']]), { go: false, why: 'other-activation' }],
    ['a job reported for this activation', fresh('running', [[KEYS.jobStarted, '2026-11-29T11:58:00.000Z']]), { go: false, why: 'job-started' }],
    ['a job report of an earlier activation (R3)', fresh('running', [[KEYS.jobStarted, '2026-11-29T10:58:00.000Z']]), { go: true }],
    ['parking already (its runner ended)', fresh('running', [[KEYS.parking, encodeParking('2026-11-29T11:00:00.000Z', now)]]), { go: false, why: 'parking' }],
    ['a parking tag of an earlier activation (R3)', fresh('running', [[KEYS.parking, encodeParking('2026-11-29T10:00:00.000Z', now)]]), { go: true }],
  ] as const)('%s', (_name, observed, verdict) => {
    expect(idleStopVerdict(planned, observed, KEYS, now)).toEqual(verdict);
  });
});

describe('a termination the sweep planned for a reusable instance is checked against the activation it read (R3)', () => {
  /** A reusable instance whose job ended (runner gone, no report): planned as job-finished. */
  function finished(): FakeInstance {
    return aws.addInstance({
      state: 'running',
      tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: 'github:1', [KEYS.runnerId]: '9', [KEYS.traceId]: 't-9' },
    });
  }
  /** Between the sweep's reading of the instances and its action, `change` happens. */
  function meanwhile(change: () => void) {
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      const seen = await list();
      change();
      return seen;
    };
  }

  it('terminates it when it still holds that activation', async () => {
    const i = finished();
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(i.state).toBe('terminated');
  });

  it('keeps it when it parked and was activated again meanwhile', async () => {
    const i = finished();
    meanwhile(() => i.tags.set(KEYS.activatedAt, sweepNow().toISOString()));
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(i.state).toBe('running');
    expect(lines.logs(/^keeping the instance: it is no longer the activation/)).toHaveLength(1);
  });

  it('keeps it when it began to park meanwhile, or parked', async () => {
    const parking = finished();
    const parked = finished();
    meanwhile(() => {
      parking.tags.set(KEYS.parking, encodeParking(parking.tags.get(KEYS.activatedAt)!, sweepNow()));
      for (const k of [KEYS.activatedAt, KEYS.jobId, KEYS.runnerId, KEYS.traceId]) parked.tags.delete(k);
      parked.state = 'stopped';
    });
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect([parking.state, parked.state]).toEqual(['running', 'stopped']);
  });

  it('keeps it for the next sweep when the second reading fails', async () => {
    const i = finished();
    aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(i.state).toBe('running');
    expect(await handler()).toMatchObject({ terminated: 1 });
  });
});
