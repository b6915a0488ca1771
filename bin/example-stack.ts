import { Stack, type StackProps } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Construct } from 'constructs';
import { WarmRunners } from '../lib';
import { exampleFleet } from './example-props';

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
    this.runners = new WarmRunners(this, 'Runners', {
      vpc,
      ...exampleFleet(ec2.MachineImage.latestAmazonLinux2023()),
    });
  }
}
