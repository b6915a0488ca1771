import type { SQSEvent, SQSRecord } from 'aws-lambda';
import { buildFleetConfig, CREATED_BY, qualifiedJobId, tagKeys, WARM_STANDBY_VALUE, Provider, type FleetConfig, type JobMessage, type PoolInput } from '../../lambdas/shared/contract';

export const PREFIX = 'test';
export const KEYS = tagKeys(PREFIX);
/** LAMBDA_ENV.instanceArnPrefix for tests: moto's default account and region. */
export const INSTANCE_ARN_PREFIX = 'arn:aws:ec2:us-east-1:123456789012:instance/';

export function fleetConfig(pool: Partial<PoolInput> = {}): FleetConfig {
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: '1', organization: 'acme' },
    pools: [
      {
        name: 'linux',
        provider: Provider.GITHUB,
        launchTemplateId: 'lt-0123456789abcdef0',
        launchTemplateVersion: '1',
        subnetIds: ['subnet-1'],
        instanceTypes: ['t3.micro'],
        maxRunners: 50,
        warmSize: 10,
        ...pool,
      },
    ],
  });
}

export function job(n: number, overrides: Partial<JobMessage> = {}): JobMessage {
  return {
    schemaVersion: 1,
    provider: Provider.GITHUB,
    jobId: qualifiedJobId(Provider.GITHUB, String(n)),
    providerJobId: String(n),
    pool: 'linux',
    owner: 'acme',
    project: 'app',
    labels: ['linux'],
    labelsResolved: true,
    traceId: `trace-${n}`,
    deliveryId: `delivery-${n}`,
    receivedAt: '2026-11-29T11:59:00.000Z',
    ...overrides,
  };
}

export function record(body: string, options: { id?: string; receiveCount?: number; attributes?: Record<string, string> } = {}): SQSRecord {
  const id = options.id ?? `msg-${Math.random().toString(36).slice(2)}`;
  return {
    messageId: id,
    receiptHandle: `rh-${id}`,
    body,
    attributes: {
      ApproximateReceiveCount: String(options.receiveCount ?? 1),
      SentTimestamp: '0',
      SenderId: 'x',
      ApproximateFirstReceiveTimestamp: '0',
      MessageGroupId: 'g',
    } as SQSRecord['attributes'],
    messageAttributes: Object.fromEntries(
      Object.entries(options.attributes ?? {}).map(([k, v]) => [k, { stringValue: v, dataType: 'String', stringListValues: [], binaryListValues: [] }]),
    ),
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:jobs.fifo',
    awsRegion: 'us-east-1',
  };
}

export function sqsEvent(...records: SQSRecord[]): SQSEvent {
  return { Records: records };
}

export function jobEvent(jobs: JobMessage[]): SQSEvent {
  return sqsEvent(...jobs.map((j) => record(JSON.stringify(j), { id: `msg-${j.providerJobId}` })));
}

/** Tags of a parked warm standby of pool "linux". */
export function standbyTags(pool = 'linux'): Record<string, string> {
  return { [KEYS.pool]: pool, [KEYS.warmStandby]: WARM_STANDBY_VALUE, [KEYS.createdBy]: CREATED_BY.pool, 'aws:ec2launchtemplate:version': '1' };
}

/** Collects log lines and EMF records. */
export class Lines {
  readonly lines: string[] = [];
  readonly sink = (line: string) => this.lines.push(line);
  json(): Record<string, unknown>[] {
    return this.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  }
  logs(message?: string | RegExp): Record<string, unknown>[] {
    return this.json().filter((l) => typeof l.message === 'string' && (message === undefined || (typeof message === 'string' ? l.message === message : message.test(l.message as string))));
  }
  /** Sum of a metric over all EMF records whose dimensions include `dims`. */
  metric(name: string, dims: Record<string, string> = {}): number {
    let sum = 0;
    for (const l of this.json()) {
      if (!l._aws || !(name in l)) continue;
      if (!Object.entries(dims).every(([k, v]) => l[k] === v)) continue;
      const v = l[name];
      sum += Array.isArray(v) ? v.length : (v as number);
    }
    return sum;
  }
}
