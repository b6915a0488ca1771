/**
 * Serves 1,000, 5,000 and 10,000 jobs through ONE scale-up handler instance (one warm Lambda
 * container) with the AWS clients and the CI provider replaced by stateless fakes, and
 * prints the heap after forced GC at each mark. Run with --expose-gc (the test does):
 *   node --expose-gc --import tsx test/memory/serve-jobs.ts [--leaky]
 * The fakes are plain objects rather than aws-sdk-client-mock stubs: sinon keeps every
 * call's arguments, which would itself grow per job and hide the handler's own retention.
 * --leaky wraps the handler with an unbounded "already seen" cache of job messages: the
 * kind of per-job retention the check must catch.
 */
import type { SQSEvent } from 'aws-lambda';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, CREATED_BY, runnerName, tagKeys, WARM_STANDBY_VALUE, Provider, type CiProvider, type JobMessage } from '../../lambdas/shared/contract';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');

const prefix = 'mem';
const keys = tagKeys(prefix);
const config = buildFleetConfig({
  prefix,
  github: { appId: '1', organization: 'acme' },
  pools: [{ name: 'linux', provider: Provider.GITHUB, launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s-1'], instanceTypes: ['t3.micro'], maxRunners: 1000, warmSize: 10 }],
});
const ids = Array.from({ length: 10 }, (_, i) => `i-${(0x1000 + i).toString(16).padStart(17, '0')}`);
const standbyTags = [
  { Key: keys.pool, Value: 'linux' },
  { Key: keys.warmStandby, Value: WARM_STANDBY_VALUE },
  { Key: keys.createdBy, Value: CREATED_BY.pool },
];

// Stateless fakes: every answer is built fresh, nothing is remembered between calls.
const ec2 = {
  async send(command: { constructor: { name: string }; input: Record<string, unknown> }) {
    switch (command.constructor.name) {
      case 'DescribeInstancesCommand':
        return { Reservations: [{ Instances: ids.map((InstanceId) => ({ InstanceId, State: { Name: 'stopped' }, StateReason: { Code: 'Client.InstanceInitiatedShutdown' }, LaunchTime: new Date(), Tags: standbyTags })) }] };
      case 'StartInstancesCommand':
        return { StartingInstances: (command.input.InstanceIds as string[]).map((InstanceId) => ({ InstanceId, PreviousState: { Name: 'stopped' } })) };
      default:
        return {};
    }
  },
};
const ok = { async send() { return {}; } };
let serial = 0;
const ci: CiProvider = {
  provider: Provider.GITHUB,
  async createRunner(_job: JobMessage, instanceId: string) {
    const runnerId = String(++serial);
    return { runnerId, name: runnerName(prefix, instanceId, new Date()), secret: `jit-${runnerId}` };
  },
  async deleteRunner() {},
  async listRunners() { return []; },
  async isJobQueued() { return true; },
};
const providers = { github: ci };

const base = createScaleUpHandler({
  ec2: ec2 as never,
  ssm: ok as never,
  sqs: ok as never,
  aws: new AwsCaller({ sleep: async () => {} }),
  loadConfig: async () => config,
  providers: () => providers,
  queueUrl: 'q',
  deadLetterQueueUrl: 'd',
  instanceArnPrefix: 'arn:aws:ec2:us-east-1:123456789012:instance/',
  sink: () => {},
});

const leaky = process.argv.includes('--leaky');
const seen = new Map<string, JobMessage>();
const handler = leaky
  ? async (event: SQSEvent) => {
      for (const r of event.Records) {
        const j = JSON.parse(r.body) as JobMessage;
        seen.set(j.jobId, j);
      }
      return base(event);
    }
  : base;

function event(from: number): SQSEvent {
  return {
    Records: Array.from({ length: 10 }, (_, k) => {
      const n = from + k;
      const body = JSON.stringify({
        schemaVersion: 1, provider: Provider.GITHUB, jobId: `github:${n}`, providerJobId: String(n), pool: 'linux', owner: 'acme', project: 'app',
        labels: ['linux'], labelsResolved: true, traceId: `trace-${n}`, deliveryId: `d-${n}`, receivedAt: new Date().toISOString(),
      });
      return { messageId: `m-${n}`, receiptHandle: `r-${n}`, body, attributes: { ApproximateReceiveCount: '1', MessageGroupId: `github:${n}` }, messageAttributes: {} } as never;
    }),
  };
}

async function heapAfterGc(): Promise<number> {
  for (let i = 0; i < 4; i++) {
    gc!();
    await new Promise((r) => setImmediate(r));
  }
  return process.memoryUsage().heapUsed;
}

async function main() {
  const marks = [1_000, 5_000, 10_000];
  const heaps: Record<number, number> = {};
  let served = 0;
  for (const mark of marks) {
    while (served < mark) {
      const res = await handler(event(served));
      if (res.batchItemFailures.length) throw new Error(`jobs failed: ${JSON.stringify(res.batchItemFailures)}`);
      served += 10;
    }
    heaps[mark] = await heapAfterGc();
  }
  const perJob = (heaps[10_000]! - heaps[1_000]!) / 9_000;
  console.log(JSON.stringify({ leaky, heaps, bytesPerJob: Math.round(perJob * 10) / 10 }));
}

void main();
