import { Duration } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { GitLabExecutor, type GitHubConnectionProps, type GitLabConnectionProps, type RunnerPoolProps } from '../lib/props';
import { GitLabRunnerType, Provider } from '../lambdas/shared/contract';

/**
 * The example fleet's connections and pools: ONE definition that the example CDK app
 * (`bin/example-stack.ts`) deploys and the local sandbox (`npm run local`) provisions in moto,
 * both through `lib/fleet-config-input.ts` and the contract's `buildFleetConfig`, so the
 * two cannot drift. The local tool applies its few overrides (loopback URLs, pool sizes)
 * visibly in `local/provision.ts` (`localOverrides`).
 */
export interface ExampleFleetProps {
  readonly github: GitHubConnectionProps;
  readonly gitlab: GitLabConnectionProps;
  readonly pools: RunnerPoolProps[];
}

export const EXAMPLE_GITHUB: GitHubConnectionProps = { appId: '123456', organization: 'example-org' };
export const EXAMPLE_GITLAB: GitLabConnectionProps = { url: 'https://gitlab.example.com', runnerType: GitLabRunnerType.GROUP, scopeId: 42 };

/** The example's pools for a machine image (the CDK app: the latest Amazon Linux 2023). */
export function examplePools(machineImage: ec2.IMachineImage): RunnerPoolProps[] {
  return [
    {
      name: 'linux-x64',
      provider: Provider.GITHUB,
      labels: ['linux', 'x64'],
      machineImage,
      instanceTypes: [new ec2.InstanceType('m7i.large'), new ec2.InstanceType('m6i.large')],
      maxRunners: 20,
      warm: { size: 3, schedule: [{ window: 'MON-FRI 07:00-19:00', size: 6 }], maxAge: Duration.hours(12) },
      // container: and services: jobs; installed while priming, so warm jobs never wait for it.
      docker: {},
    },
    {
      name: 'gitlab-docker',
      provider: Provider.GITLAB,
      labels: ['docker'],
      machineImage,
      spot: true,
      maxRunners: 10,
      warm: { size: 2 },
      // The docker executor: each job in its `image:` (alpine:3 when it names none).
      docker: { gitlabExecutor: GitLabExecutor.DOCKER },
    },
  ];
}

export function exampleFleet(machineImage: ec2.IMachineImage): ExampleFleetProps {
  return { github: EXAMPLE_GITHUB, gitlab: EXAMPLE_GITLAB, pools: examplePools(machineImage) };
}
