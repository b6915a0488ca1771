import { EC2Client } from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { decodeRunnerConfig, Provider, ssmPaths } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { awsError, FakeAws } from '../support/fake-aws';
import { fleetConfig, INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

/**
 * The claim window `claim.ts` leaves open (docs/control-plane.md, warm activation step 2):
 * every send of a claim loses its answer, every read-back finds nothing, and one of the
 * writes lands later. Pins what the docs say happens then; it does not close the window.
 */
const paths = ssmPaths(PREFIX);
let aws: FakeAws;
let ci: FakeCi;
let lines: Lines;

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  ci = new FakeCi(Provider.GITHUB, PREFIX);
  lines = new Lines();
});
afterAll(() => aws.restore());

function handler() {
  return createScaleUpHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    sqs: new SQSClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => fleetConfig(),
    providers: () => ({ github: ci }),
    queueUrl: 'https://sqs.local/jobs.fifo',
    deadLetterQueueUrl: 'https://sqs.local/jobs-dlq.fifo',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    now: () => aws.now,
    random: () => 0.5,
    sink: lines.sink,
  });
}

const cold = () => [...aws.instances.values()].filter((i) => i.state === 'running' && !i.tags.has(KEYS.warmStandby));

describe('a claim whose three sends are all lost and whose reads are all empty, then lands', () => {
  it('rolls back the registration, serves the job cold; the late write blocks the standby until the sweep', async () => {
    const { id } = aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags() });
    const name = paths.runnerConfig(id);
    // Not executed (yet): a 503 before SSM acted, so the read-backs find nothing.
    const sent: string[] = [];
    for (let i = 0; i < 3; i++) {
      aws.fault('PutParameter', (input) => {
        sent.push(input.Value as string);
        throw awsError('ServiceUnavailable', 503);
      });
    }
    const res = await handler()(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([]);
    expect(sent).toHaveLength(3);
    expect(new Set(sent).size).toBe(1);
    expect(lines.logs(/^claim outcome unknown after every resend/)).toHaveLength(1);
    expect(cold()).toHaveLength(1);
    expect(aws.instances.get(id)!.state).toBe('stopped');
    // The warm attempt's registration went with the rollback; the cold launch registered its own.
    const warmRunner = (decodeRunnerConfig(sent[0]!) as { jitConfig?: string }).jitConfig!.replace('jit-secret-', '');
    expect(ci.deleted).toEqual([warmRunner]);
    expect(ci.created).toBe(2);

    // One of the lost writes lands now: a dead registration's config on a parked standby.
    aws.parameters.set(name, { value: sent[0]!, tags: {}, at: aws.now, type: 'SecureString' });
    // The next job cannot claim it (refused) and goes cold too, the standby still parked.
    const next = await handler()(jobEvent([job(2)]));
    expect(next.batchItemFailures).toEqual([]);
    expect(cold()).toHaveLength(2);
    expect(aws.instances.get(id)!.state).toBe('stopped');
    expect(aws.instances.get(id)!.tags.has(KEYS.jobId)).toBe(false);
    expect(aws.parameters.get(name)?.value).toBe(sent[0]);
  });
});
