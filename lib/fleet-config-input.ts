import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { DEFAULT_PREFIX, type FleetConfigInput } from '../lambdas/shared/contract';
import { ParameterMachineImage } from './parameter-machine-image';
import { runnerVersionConfig } from './runner-version';
import type { GitHubConnectionProps, GitLabConnectionProps, RunnerPoolProps } from './props';

export const DEFAULT_INSTANCE_TYPE = new ec2.InstanceType('m7i.large');

/** Where a pool's instances come from, known once its launch template exists. */
export interface PoolPlacement {
  readonly launchTemplateId: string;
  readonly launchTemplateVersion: string;
  readonly subnetIds: string[];
}

export interface FleetConfigSource {
  readonly prefix?: string;
  readonly metricNamespace?: string;
  readonly github?: GitHubConnectionProps;
  readonly gitlab?: GitLabConnectionProps;
  readonly pools: RunnerPoolProps[];
  /** KMS key ARN of the runner config parameters. */
  readonly parameterKeyId?: string;
}

/**
 * Maps the construct's props onto the contract's FleetConfig input: the one place where CDK
 * types (Duration, InstanceType) become the plain values the Lambdas read.
 */
export function fleetConfigInput(props: FleetConfigSource, placement: (pool: RunnerPoolProps) => PoolPlacement): FleetConfigInput {
  return {
    prefix: props.prefix ?? DEFAULT_PREFIX,
    ...(props.metricNamespace ? { metricNamespace: props.metricNamespace } : {}),
    ...(props.parameterKeyId ? { parameterKeyId: props.parameterKeyId } : {}),
    ...(props.github ? { github: props.github } : {}),
    ...(props.gitlab ? { gitlab: props.gitlab } : {}),
    pools: props.pools.map((pool) => ({
      name: pool.name,
      provider: pool.provider,
      ...(pool.labels ? { labels: pool.labels } : {}),
      ...(pool.labelMatch ? { labelMatch: pool.labelMatch } : {}),
      ...(pool.runUntagged === undefined ? {} : { runUntagged: pool.runUntagged }),
      ...(pool.requireSelfHostedLabel === undefined ? {} : { requireSelfHostedLabel: pool.requireSelfHostedLabel }),
      ...(pool.organization === undefined ? {} : { organization: pool.organization }),
      ...(pool.repositories === undefined ? {} : { repositories: pool.repositories }),
      ...(pool.enterprise === undefined ? {} : { enterprise: pool.enterprise }),
      ...(pool.gitlabGroupId === undefined ? {} : { gitlabGroupId: pool.gitlabGroupId }),
      ...(pool.gitlabProjectId === undefined ? {} : { gitlabProjectId: pool.gitlabProjectId }),
      ...(pool.gitlabWebhookId === undefined ? {} : { gitlabWebhookId: pool.gitlabWebhookId }),
      ...(pool.scaleSetName === undefined ? {} : { scaleSetName: pool.scaleSetName }),
      ...(pool.scaleSetRunnerGroup === undefined ? {} : { scaleSetRunnerGroup: pool.scaleSetRunnerGroup }),
      ...placement(pool),
      instanceTypes: (pool.instanceTypes ?? [DEFAULT_INSTANCE_TYPE]).map((t) => t.toString()),
      ...(pool.spot === undefined ? {} : { spot: pool.spot }),
      ...(pool.maxRunners === undefined ? {} : { maxRunners: pool.maxRunners }),
      ...(pool.idleTimeout ? { idleTimeoutSeconds: pool.idleTimeout.toSeconds() } : {}),
      ...(pool.idleConfirmation ? { idleConfirmSeconds: pool.idleConfirmation.toSeconds() } : {}),
      ...(pool.maxJobDuration ? { maxJobSeconds: pool.maxJobDuration.toSeconds() } : {}),
      ...(pool.warm?.size === undefined ? {} : { warmSize: pool.warm.size }),
      ...(pool.warm?.schedule ? { warmSchedule: pool.warm.schedule } : {}),
      ...(pool.warm?.maxAge ? { warmMaxAgeSeconds: pool.warm.maxAge.toSeconds() } : {}),
      ...(pool.warm?.primingTimeout ? { primingTimeoutSeconds: pool.warm.primingTimeout.toSeconds() } : {}),
      ...(pool.warm?.primeFailureLimit === undefined ? {} : { primeFailureLimit: pool.warm.primeFailureLimit }),
      ...(pool.warm?.primeBackoffCap ? { primeBackoffCapSeconds: pool.warm.primeBackoffCap.toSeconds() } : {}),
      // An image resolved at launch: the pool compares its parked instances with the parameter.
      ...(pool.machineImage instanceof ParameterMachineImage ? { imageParameter: pool.machineImage.parameterName } : {}),
      runnerVersion: runnerVersionConfig(pool),
      ...(pool.reuse
        ? {
            reuse: {
              ...(pool.reuse.scope ? { scope: pool.reuse.scope } : {}),
              ...(pool.reuse.maxJobs === undefined ? {} : { maxJobs: pool.reuse.maxJobs }),
              ...(pool.reuse.maxAge ? { maxAgeSeconds: pool.reuse.maxAge.toSeconds() } : {}),
              ...(pool.reuse.cacheDirectories ? { cacheDirectories: pool.reuse.cacheDirectories } : {}),
            },
          }
        : {}),
    })),
  };
}
