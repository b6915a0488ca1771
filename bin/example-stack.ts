import { Duration, Stack, type StackProps } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Construct } from 'constructs';
import { WarmRunners } from '../lib';

/**
 * The example fleet: one GitHub pool and one GitLab pool with warm pools, in a new VPC.
 * Environment-agnostic, so it synthesizes without an AWS account.
 */
export class ExampleRunnersStack extends Stack {
  readonly runners: WarmRunners;

  constructor(scope: Construct, id: string, props: StackProps = {}) {
    super(scope, id, props);
    const vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: 1,
      flowLogs: { all: { trafficType: ec2.FlowLogTrafficType.REJECT } },
    });
    const image = ec2.MachineImage.latestAmazonLinux2023();
    this.runners = new WarmRunners(this, 'Runners', {
      vpc,
      github: { appId: '123456', organization: 'example-org' },
      gitlab: { url: 'https://gitlab.example.com', runnerType: 'group_type', scopeId: 42 },
      pools: [
        {
          name: 'linux-x64',
          provider: 'github',
          labels: ['linux', 'x64'],
          machineImage: image,
          instanceTypes: [new ec2.InstanceType('m7i.large'), new ec2.InstanceType('m6i.large')],
          maxRunners: 20,
          warm: { size: 3, schedule: [{ window: 'MON-FRI 07:00-19:00', size: 6 }], maxAge: Duration.hours(12) },
        },
        {
          name: 'gitlab-docker',
          provider: 'gitlab',
          labels: ['docker'],
          machineImage: image,
          spot: true,
          maxRunners: 10,
          warm: { size: 2 },
        },
      ],
    });
  }
}
