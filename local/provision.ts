import { randomBytes } from 'node:crypto';
import { CreateLogGroupCommand } from '@aws-sdk/client-cloudwatch-logs';
import { DescribeSubnetsCommand } from '@aws-sdk/client-ec2';
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { GetParameterCommand, PutParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { exampleFleet, type ExampleFleetProps } from '../bin/example-props';
import { bootLogGroupName, buildFleetConfig, DEFAULT_PREFIX, ssmPaths, type FleetConfig, type PoolReuseConfig, Provider, type RunnerPackage } from '../lambdas/shared/contract';
import { fleetConfigInput, type PoolPlacement } from '../lib/fleet-config-input';
import { poolPrepareCommands } from '../lib/pool-prepare-commands';
import type { PoolReuseProps, RunnerPoolProps } from '../lib/props';
import { followsLatestRunner, RunnerVersion } from '../lib/runner-version';
import { LOCAL_SCALE_SET } from './scale-set-run';
import { createLocalLaunchTemplate, LOCAL_APT_IMAGE_ID, updateLocalLaunchTemplate, type LocalMachineSettings, type LocalPoolTemplate } from './instances/launch-templates';
import type { LocalAwsClients } from './lambdas';

/**
 * Creates in moto what the CDK app creates in an account, from the SAME props object the
 * example app deploys (`bin/example-props.ts`), through the same `fleetConfigInput` and the
 * contract's `buildFleetConfig`: the pools' launch templates (user data rendered by `lib/`,
 * for a local machine), the FIFO jobs queue with its dead-letter queue and redrive policy,
 * the CI credential parameters, and the FleetConfig parameter the Lambdas read.
 */

/** The example image is resolved from SSM at deploy time; moto needs an AMI id it knows. */
export const LOCAL_AMI = 'ami-12c6146b';

/**
 * The fleet's GitLab webhook at the loopback GitLab: hook 1 of the example's group, the loopback
 * server's default. With it the reconciler lists the hook's events and resends failed ones.
 */
export const LOCAL_GITLAB_WEBHOOK_ID = 1;
/**
 * `npm run local -- --scopes`: a second GitLab group the fleet serves beside the
 * example's, with one project, its own webhook (the same id, numbered per group as GitLab does)
 * and a pool of its own tags (pools of two groups may not match one job: docs/gitlab.md).
 */
export const LOCAL_SECOND_GITLAB_GROUP = { id: 43, project: { id: 4811, path: 'group-43/etl' }, pool: 'gitlab-data', labels: ['data'] } as const;
/**
 * `npm run local -- --scopes`: a second GitHub organisation the fleet serves beside the
 * example's (the loopback GitHub installs every App on it too), with a pool of its own
 * `organization` and the SAME labels as the example's GitHub pool: the job's organisation, not
 * its labels, decides which pool serves it (docs/github.md "Several organisations").
 */
export const LOCAL_SECOND_GITHUB_ORGANIZATION = { organization: 'example-partner', repository: 'example-partner/app', pool: 'linux-x64-partner' } as const;

/** What the local tool changes in the example fleet, all here. */
export interface LocalSettings {
  /** Warm pool size of every pool (the example's schedule is dropped, see `localOverrides`). */
  readonly poolSize: number;
  /** The loopback GitHub API URL (`LoopbackGitHub.url`). */
  readonly githubApiUrl: string;
  /** The loopback GitLab URL (`LoopbackGitLab.url`). */
  readonly gitlabUrl: string;
  /** Further GitHub Apps of the loopback GitHub (`npm run local -- --apps N`). @default - none: one App */
  readonly githubAdditionalAppIds?: readonly string[];
  /**
   * A second GitLab pool, in `LOCAL_SECOND_GITLAB_GROUP` (the example's GitLab pool copied with
   * the group's name, tags, `gitlabGroupId` and `gitlabWebhookId`). @default false
   */
  readonly secondGitLabGroup?: boolean;
  /**
   * A second GitHub pool, in `LOCAL_SECOND_GITHUB_ORGANIZATION` (the example's GitHub pool copied
   * with the organisation's name and pool `organization`, labels unchanged). @default false
   */
  readonly secondGitHubOrganization?: boolean;
  /**
   * `npm run local -- --scale-set`: a scale-set pool beside the example's GitHub pool
   * (`LOCAL_SCALE_SET`: the GitHub pool copied with its own name and `scaleSetName`, labels
   * unchanged, after it in the configuration so that a job of those labels that does not name
   * the scale set is the webhook pool's), and no GitLab pool. @default false
   */
  readonly scaleSetPool?: boolean;
  /**
   * Each provider's pools install this `runnerPackage` on a stock image (the loopback release
   * server's packages). @default - the example's: the contract's pinned releases
   */
  readonly runnerPackages?: Partial<Readonly<Record<Provider, RunnerPackage>>>;
  /**
   * Every pool follows the newest runner release (`npm run local -- --roll`): `runnerVersion:
   * RunnerVersion.latest()`, which a GitLab pool needs set explicitly (its default is the pin).
   * @default false: the example's (GitHub pools follow, GitLab pools keep the pin)
   */
  readonly followLatestRunner?: boolean;
  /** Every pool reusable with these settings (`npm run local -- --reuse`). @default - no reuse */
  readonly reuse?: PoolReuseProps;
  /**
   * Keep the pools' `docker` (`npm run local -- --docker`: the run starts a daemon of its own).
   * @default false: the pools' Docker is dropped (no daemon to install or ask), GitLab runs the shell executor
   */
  readonly docker?: boolean;
  /**
   * Pools whose image is Ubuntu-style (`npm run local -- --apt-pool NAME`): their launch
   * template names `LOCAL_APT_IMAGE_ID`, whose played machines install with apt-get.
   * @default - none: every pool's machines are Amazon Linux-style (dnf)
   */
  readonly aptPools?: readonly string[];
}

/** Settings of the local AWS resources that are not part of the FleetConfig. */
export const LOCAL_QUEUE = {
  /**
   * Deployed: 6 minutes (six times scale-up's timeout, lib/job-queue.ts). Locally a failed
   * message reappears after 5 s, so a retried job finishes within the run.
   */
  visibilityTimeoutSeconds: 5,
  /** lib/job-queue.ts's default. */
  maxReceiveCount: 5,
} as const;

/**
 * The local overrides of the example fleet, in one place:
 * - the CI connections point at the loopback servers (`apiUrl`, `url`), and GitLab's names its
 *   webhook (`LOCAL_GITLAB_WEBHOOK_ID`, so the reconciler's resend runs); the App id,
 *   organisation, runner type and group stay the example's (the servers are started with them);
 * - every pool keeps `poolSize` parked instances and the example's weekday schedule is
 *   dropped (it would raise the target to 6 during office hours and make runs depend on the
 *   clock);
 * - with `runnerPackages`, each pool's `runnerPackage` is its provider's (the loopback release
 *   server: these machines cannot reach GitHub's or GitLab's download sites);
 * - with `followLatestRunner`, every pool's `runnerVersion` is `RunnerVersion.latest()`;
 * - without `docker`, the pools' `docker` is dropped: a played machine has no Docker daemon
 *   unless the run starts one (`npm run local -- --docker`, docs/local.md "Docker");
 * - with `aptPools`, those pools' image is Ubuntu-style (`LOCAL_APT_IMAGE_ID`).
 * Everything else (labels, instance types, spot, limits, ages) is the example's.
 */
export function localOverrides(example: ExampleFleetProps, local: LocalSettings): ExampleFleetProps {
  const unknown = (local.aptPools ?? []).filter((name) => !example.pools.some((p) => p.name === name));
  if (unknown.length > 0) throw new Error(`apt pool(s) ${unknown.join(', ')} not in the example fleet (${example.pools.map((p) => p.name).join(', ')})`);
  return {
    github: { ...example.github, apiUrl: local.githubApiUrl, ...(local.githubAdditionalAppIds?.length ? { additionalAppIds: [...local.githubAdditionalAppIds] } : {}) },
    gitlab: { ...example.gitlab, url: local.gitlabUrl, webhookId: LOCAL_GITLAB_WEBHOOK_ID },
    pools: withSecondScopes(example.pools, local).map((pool): RunnerPoolProps => {
      const { schedule: _dropped, ...warm } = pool.warm ?? {};
      const runnerPackage = local.runnerPackages?.[pool.provider];
      const { docker, ...rest } = pool;
      const apt = local.aptPools?.includes(pool.name) ? { machineImage: ec2.MachineImage.genericLinux({ 'us-east-1': LOCAL_APT_IMAGE_ID }) } : {};
      return { ...rest, ...(local.docker && docker ? { docker } : {}), ...apt, warm: { ...warm, size: local.poolSize }, ...(runnerPackage ? { runnerPackage } : {}), ...(local.followLatestRunner ? { runnerVersion: RunnerVersion.latest() } : {}), ...(local.reuse ? { reuse: local.reuse } : {}) };
    }),
  };
}

/**
 * The example's pools, with `secondGitHubOrganization` the GitHub pool's copy in the second
 * organisation, with `secondGitLabGroup` the GitLab pool's copy in the second group, with
 * `scaleSetPool` the GitHub pool's scale-set copy (and no GitLab pool).
 */
function withSecondScopes(pools: readonly RunnerPoolProps[], local: LocalSettings): RunnerPoolProps[] {
  const github = pools.find((p) => p.provider === Provider.GITHUB);
  const gitlab = pools.find((p) => p.provider === Provider.GITLAB);
  const o = LOCAL_SECOND_GITHUB_ORGANIZATION;
  const g = LOCAL_SECOND_GITLAB_GROUP;
  return [
    ...pools.filter((p) => !local.scaleSetPool || p.provider === Provider.GITHUB),
    ...(local.scaleSetPool && github ? [{ ...github, name: LOCAL_SCALE_SET.pool, scaleSetName: LOCAL_SCALE_SET.name }] : []),
    ...(local.secondGitHubOrganization && github ? [{ ...github, name: o.pool, organization: o.organization }] : []),
    ...(local.secondGitLabGroup && gitlab ? [{ ...gitlab, name: g.pool, labels: [...g.labels], gitlabGroupId: g.id, gitlabWebhookId: LOCAL_GITLAB_WEBHOOK_ID }] : []),
  ];
}

/** The FleetConfig the local fleet runs on: the example's props, the local overrides, moto's placement. */
export function localFleetConfig(example: ExampleFleetProps, local: LocalSettings, placement: (pool: RunnerPoolProps) => PoolPlacement, prefix = DEFAULT_PREFIX): FleetConfig {
  return buildFleetConfig(fleetConfigInput({ ...localOverrides(example, local), prefix }, placement));
}

/** The example fleet with moto's image (the props' image is only used by the CDK app). */
export function localExample(): ExampleFleetProps {
  return exampleFleet(ec2.MachineImage.genericLinux({ 'us-east-1': LOCAL_AMI }));
}

export interface CiCredentials {
  readonly githubAppPrivateKeyPem: string;
  /** The keys of the further GitHub Apps, each put into its own parameter. */
  readonly githubAdditionalApps?: readonly { readonly appId: string; readonly privateKeyPem: string }[];
  readonly gitlabAccessToken: string;
}

export interface ProvisionOptions {
  readonly prefix?: string;
  readonly local: LocalSettings;
  readonly credentials: CiCredentials;
  readonly machine: LocalMachineSettings;
  readonly example?: ExampleFleetProps;
}

export interface PoolTemplate {
  readonly pool: string;
  readonly provider: Provider;
  readonly launchTemplateId: string;
  readonly version: string;
  readonly template: LocalPoolTemplate;
}

export interface ProvisionedFleet {
  readonly config: FleetConfig;
  readonly example: ExampleFleetProps;
  readonly local: LocalSettings;
  readonly machine: LocalMachineSettings;
  readonly templates: readonly PoolTemplate[];
  readonly subnetId: string;
  readonly queueUrl: string;
  readonly deadLetterQueueUrl: string;
  /** The webhook secrets the loopback senders sign with (fresh per run, never printed). */
  readonly webhook: { readonly githubSecret: string; readonly gitlabToken: string };
}

/** What a pool's local launch template renders: its prepare commands (under either name), runner package and reuse. */
export function localPoolTemplate(pool: RunnerPoolProps, reuse: PoolReuseConfig | undefined): LocalPoolTemplate {
  const prepareCommands = poolPrepareCommands(pool);
  return {
    name: pool.name,
    provider: pool.provider,
    ...(prepareCommands.length > 0 ? { prepareCommands } : {}),
    ...(pool.runnerPackage ? { runnerPackage: pool.runnerPackage } : {}),
    // As lib/runner-fleet.ts renders it: a pool without a pin follows the resolved release.
    ...(followsLatestRunner(pool) ? { followLatestRunner: true } : {}),
    ...(reuse ? { reuse } : {}),
    ...(pool.docker ? { docker: pool.docker } : {}),
  };
}

export async function provision(clients: LocalAwsClients, options: ProvisionOptions): Promise<ProvisionedFleet> {
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  const example = options.example ?? localExample();
  const paths = ssmPaths(prefix);
  await refuseUsedEndpoint(clients.ssm, paths.fleetConfig);
  const subnets = await clients.ec2.send(new DescribeSubnetsCommand({ Filters: [{ Name: 'default-for-az', Values: ['true'] }] }));
  const subnetId = subnets.Subnets?.[0]?.SubnetId;
  if (!subnetId) throw new Error('moto has no default subnet');

  const templates: PoolTemplate[] = [];
  // A reusable pool's boot script renders the pool's reuse as the FleetConfig carries it (its
  // defaults resolved): the same config, built before the templates exist.
  const draft = configFor(example, options.local, [], subnetId, prefix);
  // The pools as the local fleet has them (its runnerPackage among the overrides).
  for (const pool of localOverrides(example, options.local).pools) {
    const reuse = draft.pools.find((p) => p.name === pool.name)?.reuse;
    const template: LocalPoolTemplate = {
      ...localPoolTemplate(pool, reuse),
      ...(options.local.aptPools?.includes(pool.name) ? { imageId: LOCAL_APT_IMAGE_ID } : {}),
    };
    const lt = await createLocalLaunchTemplate(clients.ec2, template, options.machine);
    templates.push({ pool: pool.name, provider: pool.provider, launchTemplateId: lt.launchTemplateId, version: lt.version, template });
  }
  const config = configFor(example, options.local, templates, subnetId, prefix);

  const { queueUrl, deadLetterQueueUrl } = await createQueues(clients.sqs, prefix);
  // The boot log group lib/runner-fleet.ts creates: the boot scripts ship into it (they never create it).
  await clients.logs.send(new CreateLogGroupCommand({ logGroupName: bootLogGroupName(prefix) }));
  const webhook = { githubSecret: randomBytes(24).toString('hex'), gitlabToken: randomBytes(24).toString('hex') };
  const secrets: [string, string][] = [
    [paths.github.appPrivateKey, options.credentials.githubAppPrivateKeyPem],
    [paths.github.webhookSecret, webhook.githubSecret],
    [paths.gitlab.token, options.credentials.gitlabAccessToken],
    [paths.gitlab.webhookToken, webhook.gitlabToken],
    ...(options.credentials.githubAdditionalApps ?? []).map((a): [string, string] => [paths.githubAppPrivateKey(a.appId), a.privateKeyPem]),
  ];
  for (const [Name, Value] of secrets) await clients.ssm.send(new PutParameterCommand({ Name, Value, Type: 'SecureString', Overwrite: true }));
  await putFleetConfig(clients.ssm, config);
  return { config, example, local: options.local, machine: options.machine, templates, subnetId, queueUrl, deadLetterQueueUrl, webhook };
}

/** A moto that already holds a fleet would mix its instances and names into this run. */
async function refuseUsedEndpoint(ssm: SSMClient, fleetConfigParameter: string): Promise<void> {
  const found = await ssm.send(new GetParameterCommand({ Name: fleetConfigParameter })).then(
    () => true,
    (error: unknown) => {
      if ((error as Error).name === 'ParameterNotFound') return false;
      throw error;
    },
  );
  if (found) {
    throw new Error(
      `this moto already holds a fleet (${fleetConfigParameter} exists): use a fresh moto, or reset this one first (curl -X POST <endpoint>/moto-api/reset)`,
    );
  }
}

function configFor(example: ExampleFleetProps, local: LocalSettings, templates: readonly PoolTemplate[], subnetId: string, prefix: string): FleetConfig {
  return localFleetConfig(
    example,
    local,
    (pool) => {
      // No templates yet (the draft): a placeholder id the draft never uses.
      const t = templates.find((x) => x.pool === pool.name) ?? { launchTemplateId: 'lt-00000000000000000', version: '1' };
      return { launchTemplateId: t.launchTemplateId, launchTemplateVersion: t.version, subnetIds: [subnetId] };
    },
    prefix,
  );
}

async function putFleetConfig(ssm: SSMClient, config: FleetConfig): Promise<void> {
  await ssm.send(new PutParameterCommand({ Name: config.parameters.fleetConfig, Value: JSON.stringify(config), Type: 'String', Overwrite: true }));
}

async function createQueues(sqs: SQSClient, prefix: string): Promise<{ queueUrl: string; deadLetterQueueUrl: string }> {
  const dlq = await sqs.send(new CreateQueueCommand({ QueueName: `${prefix}-jobs-dlq.fifo`, Attributes: { FifoQueue: 'true', MessageRetentionPeriod: String(14 * 86_400) } }));
  const dlqArn = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq.QueueUrl!, AttributeNames: ['QueueArn'] }));
  const queue = await sqs.send(
    new CreateQueueCommand({
      QueueName: `${prefix}-jobs.fifo`,
      Attributes: {
        FifoQueue: 'true',
        VisibilityTimeout: String(LOCAL_QUEUE.visibilityTimeoutSeconds),
        MessageRetentionPeriod: String(4 * 86_400),
        RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn.Attributes!.QueueArn, maxReceiveCount: LOCAL_QUEUE.maxReceiveCount }),
      },
    }),
  );
  return { queueUrl: queue.QueueUrl!, deadLetterQueueUrl: dlq.QueueUrl! };
}

/**
 * Drift, as a deploy that changes the user data does it: a new launch template version for
 * `pool` (the new default) and the FleetConfig naming it. The Lambdas read the config again
 * after their cache (the caller clears it: a deploy replaces the containers).
 */
export async function publishNewTemplateVersion(clients: LocalAwsClients, fleet: ProvisionedFleet, pool: string): Promise<ProvisionedFleet> {
  const t = fleet.templates.find((x) => x.pool === pool);
  if (!t) throw new Error(`no pool "${pool}"`);
  const { version } = await updateLocalLaunchTemplate(clients.ec2, t.launchTemplateId, t.template, fleet.machine);
  const templates = fleet.templates.map((x) => (x.pool === pool ? { ...x, version } : x));
  const config = configFor(fleet.example, fleet.local, templates, fleet.subnetId, fleet.config.prefix);
  await putFleetConfig(clients.ssm, config);
  return { ...fleet, templates, config };
}
