import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { WarmRunners } from '../../lib';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { Provider, reconciledDeliveryId, type FleetConfig } from '../../lambdas/shared/contract';
import { alarmFires, emfDatapoints, type Datapoint } from '../support/alarm-eval';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, Lines, PREFIX } from '../support/fixtures';
import { createJobRecordTable, motoDynamo, motoFleet } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const TABLE = 'job-records';
let config: FleetConfig;
const { moto, c } = motoForFile(async (m) => {
  config = await motoFleet(m.c, { warmSize: 0 });
  await createJobRecordTable(m.dynamo, TABLE);
});

/** The synthesized LostDeliveriesAlarm of a fleet of the same prefix (so namespace), default reconcile interval. */
function lostDeliveriesAlarm(): Record<string, unknown> {
  const stack = new Stack(new App(), 'S');
  const runners = new WarmRunners(stack, 'Runners', {
    prefix: config.prefix,
    vpc: new ec2.Vpc(stack, 'Vpc'),
    github: { appId: '1', organization: 'org' },
    pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() }],
  });
  const alarm = runners.node.findChild('LostDeliveriesAlarm') as cloudwatch.Alarm;
  return (Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm')[stack.getLogicalId(alarm.node.defaultChild as cloudwatch.CfnAlarm)] as { Properties: Record<string, unknown> }).Properties;
}

/** Scale-up over moto with a real record table; every SQS send (waits, retry checks) dropped. */
function scaleUp(lines: Lines) {
  const aws = new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
  const ci = new FakeCi(Provider.GITHUB, PREFIX);
  const handler = createScaleUpHandler({
    ...c,
    sqs: { send: async () => ({}) } as never,
    aws,
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: 'q',
    deadLetterQueueUrl: 'dlq',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    jobRecords: new DynamoJobRecords(aws, motoDynamo(moto.endpoint), TABLE),
    sink: lines.sink,
    options: { maxWaitSeconds: 3600 },
  });
  return (j: ReturnType<typeof job>, id: string) => handler({ Records: jobEvent([j]).Records.map((r) => ({ ...r, messageId: id })) });
}

const reconciledCopy = (n: number) => job(n, { receivedAt: new Date().toISOString(), deliveryId: reconciledDeliveryId(Provider.GITHUB, String(n)), traceId: reconciledDeliveryId(Provider.GITHUB, String(n)) });

describe('lost deliveries', { timeout: scaled(120_000) }, () => {
  it('count a job first seen through the reconciler, not one the webhook queued first, and fire the alarm when they go on run after run', async () => {
    const alarm = lostDeliveriesAlarm();
    const lines = new Lines();
    const run = scaleUp(lines);
    // Job 10: the webhook's delivery first, then the reconciler's copy (the job waited): not lost.
    expect((await run(job(10, { receivedAt: new Date().toISOString() }), 'm-10')).batchItemFailures).toEqual([]);
    expect((await run(reconciledCopy(10), 'm-10-copy')).batchItemFailures).toEqual([]);
    expect(lines.metric(config.metrics.names.lostDeliveries)).toBe(0);
    // Jobs 11..13: the reconciler's copy is the first: three lost deliveries.
    for (const n of [11, 12, 13]) expect((await run(reconciledCopy(n), `m-${n}`)).batchItemFailures).toEqual([]);
    // Job 11 found again at a later run: counted once.
    expect((await run(reconciledCopy(11), 'm-11-again')).batchItemFailures).toEqual([]);
    const points = emfDatapoints(lines.lines).filter((p) => p.name === config.metrics.names.lostDeliveries);
    expect(lines.metric(config.metrics.names.lostDeliveries)).toBe(3);

    // The same datapoints, as three reconciler runs would spread them: one per period.
    const period = (alarm.Period as number) * 1000;
    const inRuns = (runs: number[]): Datapoint[] => {
      const fleetWide = points.filter((p) => Object.keys(p.dimensions).length === 0);
      return fleetWide.slice(0, runs.length).map((p, i) => ({ ...p, timestamp: runs[i]! * period }));
    };
    expect(alarmFires(alarm, inRuns([0, 1, 2]))).toBe(true);
    expect(alarmFires(alarm, inRuns([0, 3, 5]))).toBe(true);
    // One lost delivery, or a few far apart, is normal: no page.
    expect(alarmFires(alarm, inRuns([0]))).toBe(false);
    expect(alarmFires(alarm, inRuns([0, 6, 12]))).toBe(false);
  });

  it('do not count a job the webhook queued, dead-lettered at its maximum wait, then served from the reconciler\'s copy', async () => {
    const lines = new Lines();
    const run = scaleUp(lines);
    const roomy = config;
    // One runner slot, which job 19 takes: job 20 waits for capacity.
    config = { ...config, pools: config.pools.map((p) => ({ ...p, maxRunners: 1 })) };
    expect((await run(job(19, { receivedAt: new Date().toISOString() }), 'm-19')).batchItemFailures).toEqual([]);
    // The webhook's copy, received long ago (the fixture's receivedAt is days old): dead-lettered (max-wait), its record released.
    expect((await run(job(20), 'm-20')).batchItemFailures).toEqual([]);
    expect(lines.metric(config.metrics.names.deadLettered, { Reason: 'max-wait' })).toBe(1);
    // Capacity frees up; the reconciler finds it still queued, at each of its runs: served, and no lost delivery.
    config = roomy;
    expect((await run(reconciledCopy(20), 'm-20-copy')).batchItemFailures).toEqual([]);
    expect((await run(reconciledCopy(20), 'm-20-copy-again')).batchItemFailures).toEqual([]);
    expect(lines.metric(config.metrics.names.lostDeliveries)).toBe(0);
  });
});
