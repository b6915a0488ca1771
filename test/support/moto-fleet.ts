import {
  CreateLaunchTemplateCommand,
  DescribeSubnetsCommand,
  EC2Client,
  RunInstancesCommand,
  StopInstancesCommand,
  type RunInstancesCommandOutput,
} from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { FleetConfig, PoolInput } from '../../lambdas/shared/contract';
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
