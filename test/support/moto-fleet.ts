import {
  CreateLaunchTemplateCommand,
  DescribeSubnetsCommand,
  EC2Client,
  RunInstancesCommand,
  StopInstancesCommand,
  type RunInstancesCommandOutput,
} from '@aws-sdk/client-ec2';
import { CreateTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ChangeMessageVisibilityCommand, DeleteMessageCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { SSMClient } from '@aws-sdk/client-ssm';
import { JOB_RECORD_ATTRIBUTES, type FleetConfig, type PoolInput } from '../../lambdas/shared/contract';
import { fleetConfig, KEYS, standbyTags } from './fixtures';

export interface MotoClients {
  ec2: EC2Client;
  ssm: SSMClient;
  sqs: SQSClient;
}

export function motoClients(endpoint: string): MotoClients {
  const common = { endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 };
  return { ec2: new EC2Client(common), ssm: new SSMClient(common), sqs: new SQSClient(common) };
}

/** A launch template and the default subnet, and the fleet config of one pool using them. */
export async function motoFleet(c: MotoClients, pool: Partial<PoolInput> = {}): Promise<FleetConfig> {
  const subnets = await c.ec2.send(new DescribeSubnetsCommand({}));
  const subnet = subnets.Subnets![0]!.SubnetId!;
  const lt = await c.ec2.send(
    new CreateLaunchTemplateCommand({ LaunchTemplateName: `runners-${Date.now()}-${Math.random()}`, LaunchTemplateData: { ImageId: 'ami-12c6146b', InstanceType: 't3.micro' } }),
  );
  return fleetConfig({ launchTemplateId: lt.LaunchTemplate!.LaunchTemplateId!, subnetIds: [subnet], maxRunners: 100, ...pool });
}

/** Launches `n` warm standbys from the pool's template and stops them: parked, as moto reports it. */
export async function parkInMoto(c: MotoClients, config: FleetConfig, n: number): Promise<string[]> {
  const pool = config.pools[0]!;
  const out: RunInstancesCommandOutput = await c.ec2.send(
    new RunInstancesCommand({
      MinCount: n,
      MaxCount: n,
      LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
      SubnetId: pool.subnetIds[0],
      TagSpecifications: [{ ResourceType: 'instance', Tags: Object.entries(standbyTags()).filter(([k]) => !k.startsWith('aws:')).map(([Key, Value]) => ({ Key, Value })) }],
    }),
  );
  const ids = out.Instances!.map((i) => i.InstanceId!);
  await c.ec2.send(new StopInstancesCommand({ InstanceIds: ids }));
  return ids;
}

export { KEYS };

/** A DynamoDB client on moto (not in `MotoClients`: only the per-job record tests need it). */
export function motoDynamo(endpoint: string): DynamoDBClient {
  return new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 });
}

/** The per-job record table as the construct creates it (lib/job-records.ts). */
export async function createJobRecordTable(dynamo: DynamoDBClient, name: string): Promise<void> {
  await dynamo.send(
    new CreateTableCommand({
      TableName: name,
      KeySchema: [{ AttributeName: JOB_RECORD_ATTRIBUTES.key, KeyType: 'HASH' }],
      AttributeDefinitions: [{ AttributeName: JOB_RECORD_ATTRIBUTES.key, AttributeType: 'S' }],
      BillingMode: 'PAY_PER_REQUEST',
    }),
  );
}

/**
 * Feeds a queue to a handler as the event source does: receive, invoke, delete what succeeded,
 * and (instead of waiting out the visibility timeout) make the failures visible again at once.
 * Returns once a receive finds nothing, or after `rounds` receives.
 */
export async function drainQueue(sqs: SQSClient, queueUrl: string, run: (event: SQSEvent) => Promise<SQSBatchResponse>, rounds: number): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    const got = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'] }));
    const messages = got.Messages ?? [];
    if (messages.length === 0) return;
    const records = messages.map((m) => ({ messageId: m.MessageId!, receiptHandle: m.ReceiptHandle!, body: m.Body!, attributes: m.Attributes ?? {}, messageAttributes: {} }) as unknown as SQSRecord);
    const failed = new Set((await run({ Records: records })).batchItemFailures.map((f) => f.itemIdentifier));
    for (const m of messages) {
      if (failed.has(m.MessageId!)) await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 }));
      else await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
    }
  }
}
