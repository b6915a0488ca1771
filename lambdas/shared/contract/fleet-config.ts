import { isProvider, PROVIDERS, type Provider } from './boot';
import { fleetMetricNamespace, metricNamespaceProblem, METRIC_DIMENSIONS, METRIC_NAMES, type MetricDimensions, type MetricNames } from './metrics';
import { DEFAULT_PREFIX, poolNameProblem, prefixProblem } from './names';
import { GITHUB_APP_ID_PATTERN, ssmPaths, type GitHubParameterNames, type GitLabParameterNames } from './ssm-paths';
import { parseWarmWindow, type WarmScheduleEntry } from './warm-schedule';
import { JOB_MAX_WAIT_SECONDS, LAUNCH_TICKET_SETTLE_SECONDS, launchTicketHoldSeconds } from './job-record';
import { Checker, FleetConfigError, secondsInWords } from './config-checker';
import { fleetScopeProblems, githubPoolScope, scopeServesRepository, type GitHubPoolScope, type GitHubScopeFields } from './github-scope';
import { cacheDirectoriesTotalProblem, cacheDirectoryProblem, REUSE_DEFAULTS, REUSE_LIMITS, REUSE_SCOPE_OF, type PoolReuseConfig, type ReuseScope } from './reuse';

export const FLEET_CONFIG_VERSION = 1;

/** How a job's labels (GitHub) or tags (GitLab) select a pool. */
export enum LabelMatch {
  /** The job's labels equal the pool's (GitHub's "self-hosted" aside). */
  EXACT = 'exact',
  /** The job's labels are a subset of the pool's. */
  SUBSET = 'subset',
}

/** Scope of the runners created at GitLab (`runner_type` of `POST /user/runners`). */
export enum GitLabRunnerType {
  /** Instance runners (`instance_type`), for every project of the GitLab instance; needs an administrator's token. */
  INSTANCE = 'instance_type',
  /** Group runners (`group_type`), for the projects of the group `scopeId`. */
  GROUP = 'group_type',
  /** Project runners (`project_type`), for the project `scopeId`. */
  PROJECT = 'project_type',
}

/** The GitHub App connection as the FleetConfig carries it. */
export interface GitHubConnectionConfig {
  /** The GitHub App's id. */
  readonly appId: string;
  /**
   * Further Apps installed where the first is, whose rate limits share the load (lambdas/ci/github-apps.ts);
   * each one's key is at `ssmPaths(prefix).githubAppPrivateKey(id)`. Absent or empty: one App.
   */
  readonly additionalAppIds?: string[];
  /** Organisation the runners register at (organisation-level runners). */
  readonly organization?: string;
  /** "owner/repo" names, for repository-level runners when no organisation is given. */
  readonly repositories: string[];
  /** Enterprise (slug) the runners register at instead (github-scope.ts); pools may name their own. */
  readonly enterprise?: string;
  /** Runner group id at organisation level (GitHub's default group is 1). */
  readonly runnerGroupId: number;
  /** REST API URL. */
  readonly apiUrl: string;
}

/** The GitLab connection as the FleetConfig carries it. */
export interface GitLabConnectionConfig {
  /** URL of the GitLab instance. */
  readonly url: string;
  /** Scope of the runners the fleet creates. */
  readonly runnerType: GitLabRunnerType;
  /** Group id for group_type runners, project id for project_type runners. */
  readonly scopeId?: number;
  /** The webhook delivering the Job Hooks, whose failed events the reconciler resends; absent: no resends. */
  readonly webhook?: GitLabWebhookConfig;
  /** Projects whose pending jobs the reconciler lists; absent: the runner scope's projects. */
  readonly reconcileProjectIds?: number[];
}

/** A GitLab project or group webhook, named by its owner and id (GitLab numbers hooks per owner). */
export interface GitLabWebhookConfig {
  readonly owner: GitLabWebhookOwner;
  /** The project's or the group's id. */
  readonly ownerId: number;
  readonly hookId: number;
}

/** Who owns a GitLab webhook: GitLab numbers hooks per project and per group. */
export enum GitLabWebhookOwner {
  PROJECT = 'project',
  GROUP = 'group',
}

/** The warm pool of one pool, as the FleetConfig carries it. */
export interface PoolWarmConfig {
  /** Parked instances to keep outside every schedule window. */
  readonly size: number;
  /** Sizes in UTC time windows; the first matching window wins. */
  readonly schedule: WarmScheduleEntry[];
  /** A parked instance older than this is replaced. */
  readonly maxAgeSeconds: number;
  /** A priming instance that has not parked after this long is evicted. */
  readonly primingTimeoutSeconds: number;
  /** Prime failures in a row after which the pool only probes, one standby per back-off cap. */
  readonly primeFailureLimit: number;
  /** The longest delay between launches of a pool whose standbys fail to prime. */
  readonly primeBackoffCapSeconds: number;
}

/** One runner pool as the FleetConfig carries it, every default applied. */
export interface PoolConfig {
  /** Pool name (tags, runner names, metric dimensions). */
  readonly name: string;
  /** The CI service the pool serves. */
  readonly provider: Provider;
  /** GitHub labels (besides "self-hosted") or GitLab tags a job must ask for. */
  readonly labels: string[];
  /** How the job's labels select this pool. */
  readonly labelMatch: LabelMatch;
  /** GitLab: let the runner pick untagged jobs. */
  readonly runUntagged: boolean;
  /**
   * GitHub: take only jobs whose labels include "self-hosted". Written only when true, so
   * pools that keep the default add nothing to the FleetConfig's size.
   * @default false
   */
  readonly requireSelfHostedLabel?: boolean;
  /** GitHub: the organisation whose jobs the pool takes, when not the connection's (github-scope.ts). */
  readonly organization?: string;
  /** GitHub: the repositories whose jobs the pool takes, when not the connection's. */
  readonly repositories?: string[];
  /** GitHub: the enterprise its runners register at, when not the connection's. */
  readonly enterprise?: string;
  /** Launch template of the pool's instances. */
  readonly launchTemplateId: string;
  /** Version of the launch template scale-up and the pool launch. */
  readonly launchTemplateVersion: string;
  /** Subnets the instances launch in. */
  readonly subnetIds: string[];
  /** Instance types, in order of preference. */
  readonly instanceTypes: string[];
  /** Whether cold launches use spot capacity. */
  readonly spot: boolean;
  /** Most runners of the pool at once, warm and cold together; 0 pauses the pool (no job starts, no standby is kept). */
  readonly maxRunners: number;
  /** A runner instance without a job for this long is terminated. */
  readonly idleTimeoutSeconds: number;
  /**
   * Seconds between the two idle readings of a runner the idle rule needs before it acts
   * (absent: `FLEET_DEFAULTS.idleConfirmSeconds`).
   */
  readonly idleConfirmSeconds?: number;
  /**
   * Seconds an instance's job-started report keeps the idle rule away from its runner
   * (absent: `FLEET_DEFAULTS.maxJobSeconds`); past it the two idle readings decide again, so an
   * instance whose runner ended but that outlived its job (a failed self-termination, a
   * reboot mid-job, a GitLab registration that stays listed) is still reclaimed.
   */
  readonly maxJobSeconds?: number;
  /**
   * Seconds a booting instance waits for its runner config before it reports a start failure
   * and terminates (the boot script's `WAIT_SECONDS`; absent: `FLEET_DEFAULTS.bootWaitSeconds`,
   * which the construct's user data renders). A redelivery takes over an earlier receive's
   * instance only well inside it.
   */
  readonly bootWaitSeconds?: number;
  /** The pool's warm pool. */
  readonly warm: PoolWarmConfig;
  /**
   * SSM parameter holding the AMI id the pool's launch template resolves at launch
   * (`resolve:ssm:`); the pool evicts parked instances built from another image.
   * @default - none: the image is fixed in the launch template
   */
  readonly imageParameter?: string;
  /**
   * The runner release the pool installs: `RUNNER_VERSION_LATEST` when it follows the newest
   * release (the resolver's parameter; the pool replaces parked instances of another version),
   * else the pinned version (the resolver publishes how many days GitHub still accepts it).
   * @default - unknown (a FleetConfig written before runner updates): neither
   */
  readonly runnerVersion?: string;
  /**
   * Reuse of finished instances for the next job of the same scope (contract reuse.ts).
   * @default - none: every instance serves one job and terminates
   */
  readonly reuse?: PoolReuseConfig;
  /**
   * GitLab: the group the pool's runners register in (`group_type`), instead of the
   * connection's scope (contract gitlab-scope.ts). Written only when set.
   * @default - the connection's runnerType and scopeId
   */
  readonly gitlabGroupId?: number;
  /**
   * GitLab: the project the pool's runners register in (`project_type`), instead of the
   * connection's scope. Written only when set.
   * @default - the connection's runnerType and scopeId
   */
  readonly gitlabProjectId?: number;
  /**
   * GitLab: the id of the webhook of the pool's group or project, whose failed events the
   * reconciler resends (besides the connection's `webhook`).
   * @default - none
   */
  readonly gitlabWebhookId?: number;
  /**
   * GitHub: the pool is a runner scale set (docs/scale-set.md): GitHub assigns it the jobs
   * whose `runs-on` names the scale set, the listener reads its demand, and the webhook and
   * the reconciler leave its jobs alone. Written only when set.
   * @default - none: the pool's jobs come from webhooks and the reconciler
   */
  readonly scaleSet?: PoolScaleSetConfig;
}

/** A pool's runner scale set, as the FleetConfig carries it. */
export interface PoolScaleSetConfig {
  /** The scale set's name at GitHub: what workflows put in `runs-on`. */
  readonly name: string;
  /** The runner group the scale set belongs to, by name. */
  readonly runnerGroup: string;
}

/** Names of the SSM parameters a fleet reads. */
export interface FleetParameterNames {
  /** The String parameter holding this FleetConfig. */
  readonly fleetConfig: string;
  /** Path under which every runner config lives, with a trailing "/". */
  readonly runnerConfigRoot: string;
  /** The GitHub App's secrets. */
  readonly github: GitHubParameterNames;
  /** The GitLab secrets. */
  readonly gitlab: GitLabParameterNames;
  /** KMS key (id or ARN) the runner config parameters are encrypted with; absent: alias/aws/ssm. */
  readonly kmsKeyId?: string;
}

/** The fleet's metric namespace, names and dimensions. */
export interface FleetMetricsConfig {
  /**
   * CloudWatch namespace of every metric of the fleet.
   * @jsii suppress JSII5018 it is the JSON key the Lambdas read and C# spells the property Namespace
   */
  readonly namespace: string;
  /** Metric names. */
  readonly names: MetricNames;
  /** Dimension names. */
  readonly dimensions: MetricDimensions;
}

/** The versioned runtime configuration every Lambda reads. Build it with `buildFleetConfig`. */
export interface FleetConfig {
  /** Format version; this code reads FLEET_CONFIG_VERSION (1) only. */
  readonly version: number;
  /** Prefix of every SSM path and tag key of the fleet. */
  readonly prefix: string;
  /** The SSM parameters the fleet reads. */
  readonly parameters: FleetParameterNames;
  /** The GitHub connection, when GitHub pools exist. */
  readonly github?: GitHubConnectionConfig;
  /** The GitLab connection, when GitLab pools exist. */
  readonly gitlab?: GitLabConnectionConfig;
  /** The runner pools. */
  readonly pools: PoolConfig[];
  /** Metric namespace, names and dimensions. */
  readonly metrics: FleetMetricsConfig;
}

/** Pool settings as a construct's props give them; absent fields take the defaults below. */
export interface PoolInput {
  readonly name: string;
  readonly provider: Provider;
  readonly labels?: readonly string[];
  readonly labelMatch?: LabelMatch;
  readonly runUntagged?: boolean;
  readonly requireSelfHostedLabel?: boolean;
  readonly organization?: string;
  readonly repositories?: readonly string[];
  readonly enterprise?: string;
  readonly launchTemplateId: string;
  readonly launchTemplateVersion: string;
  readonly subnetIds: readonly string[];
  readonly instanceTypes: readonly string[];
  readonly spot?: boolean;
  readonly maxRunners?: number;
  readonly idleTimeoutSeconds?: number;
  readonly idleConfirmSeconds?: number;
  readonly maxJobSeconds?: number;
  readonly bootWaitSeconds?: number;
  readonly warmSize?: number;
  readonly warmSchedule?: readonly WarmScheduleEntry[];
  readonly warmMaxAgeSeconds?: number;
  readonly primingTimeoutSeconds?: number;
  readonly primeFailureLimit?: number;
  readonly primeBackoffCapSeconds?: number;
  readonly imageParameter?: string;
  readonly runnerVersion?: string;
  readonly reuse?: {
    readonly scope?: ReuseScope;
    readonly maxJobs?: number;
    readonly maxAgeSeconds?: number;
    readonly cacheDirectories?: readonly string[];
  };
  readonly gitlabGroupId?: number;
  readonly gitlabProjectId?: number;
  readonly gitlabWebhookId?: number;
  readonly scaleSetName?: string;
  readonly scaleSetRunnerGroup?: string;
}

export interface FleetConfigInput {
  readonly prefix?: string;
  readonly github?: {
    readonly appId: string;
    readonly additionalAppIds?: readonly string[];
    readonly organization?: string;
    readonly repositories?: readonly string[];
    readonly enterprise?: string;
    readonly runnerGroupId?: number;
    readonly apiUrl?: string;
  };
  readonly gitlab?: {
    readonly url: string;
    readonly runnerType?: GitLabRunnerType;
    readonly scopeId?: number;
    readonly webhookId?: number;
    readonly webhookProjectId?: number;
    readonly webhookGroupId?: number;
    readonly reconcileProjectIds?: readonly number[];
  };
  readonly pools: readonly PoolInput[];
  readonly metricNamespace?: string;
  /** KMS key for the runner config parameters. */
  readonly parameterKeyId?: string;
}

export const FLEET_DEFAULTS = {
  maxRunners: 10,
  idleTimeoutSeconds: 15 * 60,
  idleConfirmSeconds: 2 * 60,
  // GitHub's default job timeout (timeout-minutes: 360).
  maxJobSeconds: 6 * 60 * 60,
  // The boot script's wait for its runner config (lib/user-data.ts renders it as WAIT_SECONDS).
  bootWaitSeconds: 300,
  warmSize: 0,
  warmMaxAgeSeconds: 24 * 60 * 60,
  primingTimeoutSeconds: 15 * 60,
  primeFailureLimit: 3,
  primeBackoffCapSeconds: 60 * 60,
  labelMatch: LabelMatch.EXACT,
  githubApiUrl: 'https://api.github.com',
  githubRunnerGroupId: 1,
  gitlabRunnerType: GitLabRunnerType.INSTANCE,
  // GitHub's default runner group, by name (a scale set names its group; docs/scale-set.md).
  scaleSetRunnerGroup: 'Default',
} as const;

/**
 * The webhook and projects the GitLab reconciler reads. The hook's owner defaults to the
 * runner scope (a group runner's hook is its group's, a project runner's its project's); an
 * instance runner's hook needs `webhookProjectId` or `webhookGroupId`.
 */
function gitLabReconcileConfig(gitlab: NonNullable<FleetConfigInput['gitlab']>, runnerType: GitLabRunnerType): Pick<GitLabConnectionConfig, 'webhook' | 'reconcileProjectIds'> {
  const out: { webhook?: GitLabWebhookConfig; reconcileProjectIds?: number[] } = {};
  if (gitlab.reconcileProjectIds !== undefined) out.reconcileProjectIds = [...gitlab.reconcileProjectIds];
  if (gitlab.webhookId === undefined) {
    if (gitlab.webhookProjectId !== undefined || gitlab.webhookGroupId !== undefined) throw new Error('gitlab.webhookProjectId and gitlab.webhookGroupId name the owner of gitlab.webhookId: set webhookId too, or neither');
    return out;
  }
  if (gitlab.webhookProjectId !== undefined && gitlab.webhookGroupId !== undefined) throw new Error('gitlab.webhookProjectId and gitlab.webhookGroupId are both set: a webhook belongs to a project or to a group, set one');
  const scoped =
    runnerType === GitLabRunnerType.GROUP ? { owner: GitLabWebhookOwner.GROUP, ownerId: gitlab.scopeId } : runnerType === GitLabRunnerType.PROJECT ? { owner: GitLabWebhookOwner.PROJECT, ownerId: gitlab.scopeId } : undefined;
  const owner =
    gitlab.webhookProjectId !== undefined
      ? { owner: GitLabWebhookOwner.PROJECT, ownerId: gitlab.webhookProjectId }
      : gitlab.webhookGroupId !== undefined
        ? { owner: GitLabWebhookOwner.GROUP, ownerId: gitlab.webhookGroupId }
        : scoped;
  if (!owner || owner.ownerId === undefined) {
    throw new Error(`gitlab.webhookId ${gitlab.webhookId} needs its owner: set gitlab.webhookProjectId or gitlab.webhookGroupId to the project or group whose webhook it is (instance runners have no scope to default to)`);
  }
  out.webhook = { owner: owner.owner, ownerId: owner.ownerId, hookId: gitlab.webhookId };
  return out;
}

const LABEL_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$/;
const GITLAB_RUNNER_TYPES: readonly string[] = Object.values(GitLabRunnerType);
const LABEL_MATCHES: readonly string[] = Object.values(LabelMatch);

/**
 * Builds the FleetConfig from the construct's props (or the local sandbox's), applying the
 * defaults and validating every value, so the CDK app, the Lambdas and the sandbox share
 * one definition. Values that are unresolved CDK tokens (launch template ids, subnets) are
 * accepted as strings; everything else is checked here.
 */
export function buildFleetConfig(input: FleetConfigInput): FleetConfig {
  const prefix = input.prefix ?? DEFAULT_PREFIX;
  const paths = ssmPaths(prefix);
  const config: FleetConfig = {
    version: FLEET_CONFIG_VERSION,
    prefix,
    parameters: {
      fleetConfig: paths.fleetConfig,
      runnerConfigRoot: paths.runnerConfigRoot,
      github: { ...paths.github },
      gitlab: { ...paths.gitlab },
      ...(input.parameterKeyId ? { kmsKeyId: input.parameterKeyId } : {}),
    },
    ...(input.github
      ? {
          github: {
            appId: input.github.appId,
            ...(input.github.additionalAppIds?.length ? { additionalAppIds: [...input.github.additionalAppIds] } : {}),
            ...(input.github.organization === undefined ? {} : { organization: input.github.organization }),
            repositories: [...(input.github.repositories ?? [])],
            ...(input.github.enterprise === undefined ? {} : { enterprise: input.github.enterprise }),
            runnerGroupId: input.github.runnerGroupId ?? FLEET_DEFAULTS.githubRunnerGroupId,
            apiUrl: input.github.apiUrl ?? FLEET_DEFAULTS.githubApiUrl,
          },
        }
      : {}),
    ...(input.gitlab
      ? {
          gitlab: {
            url: input.gitlab.url,
            runnerType: input.gitlab.runnerType ?? FLEET_DEFAULTS.gitlabRunnerType,
            ...(input.gitlab.scopeId === undefined ? {} : { scopeId: input.gitlab.scopeId }),
            ...gitLabReconcileConfig(input.gitlab, input.gitlab.runnerType ?? FLEET_DEFAULTS.gitlabRunnerType),
          },
        }
      : {}),
    pools: input.pools.map((p) => ({
      name: p.name,
      provider: p.provider,
      labels: [...(p.labels ?? [p.name])],
      labelMatch: p.labelMatch ?? FLEET_DEFAULTS.labelMatch,
      runUntagged: p.runUntagged ?? false,
      ...(p.requireSelfHostedLabel ? { requireSelfHostedLabel: true } : {}),
      // Written only when set: absent, the pool takes the connection's scope (github-scope.ts).
      ...(p.organization === undefined ? {} : { organization: p.organization }),
      ...(p.repositories === undefined ? {} : { repositories: [...p.repositories] }),
      ...(p.enterprise === undefined ? {} : { enterprise: p.enterprise }),
      launchTemplateId: p.launchTemplateId,
      launchTemplateVersion: p.launchTemplateVersion,
      subnetIds: [...p.subnetIds],
      instanceTypes: [...p.instanceTypes],
      spot: p.spot ?? false,
      maxRunners: p.maxRunners ?? FLEET_DEFAULTS.maxRunners,
      idleTimeoutSeconds: p.idleTimeoutSeconds ?? FLEET_DEFAULTS.idleTimeoutSeconds,
      // Written only when set: the FleetConfig parameter's size grows with every pool.
      ...(p.idleConfirmSeconds === undefined ? {} : { idleConfirmSeconds: p.idleConfirmSeconds }),
      ...(p.maxJobSeconds === undefined ? {} : { maxJobSeconds: p.maxJobSeconds }),
      ...(p.bootWaitSeconds === undefined ? {} : { bootWaitSeconds: p.bootWaitSeconds }),
      warm: {
        size: p.warmSize ?? FLEET_DEFAULTS.warmSize,
        schedule: (p.warmSchedule ?? []).map((e) => ({ window: e.window, size: e.size })),
        maxAgeSeconds: p.warmMaxAgeSeconds ?? FLEET_DEFAULTS.warmMaxAgeSeconds,
        primingTimeoutSeconds: p.primingTimeoutSeconds ?? FLEET_DEFAULTS.primingTimeoutSeconds,
        primeFailureLimit: p.primeFailureLimit ?? FLEET_DEFAULTS.primeFailureLimit,
        primeBackoffCapSeconds: p.primeBackoffCapSeconds ?? FLEET_DEFAULTS.primeBackoffCapSeconds,
      },
      ...(p.imageParameter === undefined ? {} : { imageParameter: p.imageParameter }),
      ...(p.runnerVersion === undefined ? {} : { runnerVersion: p.runnerVersion }),
      ...(p.reuse === undefined
        ? {}
        : {
            reuse: {
              scope: p.reuse.scope ?? REUSE_SCOPE_OF[p.provider],
              maxJobs: p.reuse.maxJobs ?? REUSE_DEFAULTS.maxJobs,
              maxAgeSeconds: p.reuse.maxAgeSeconds ?? REUSE_DEFAULTS.maxAgeSeconds,
              cacheDirectories: [...(p.reuse.cacheDirectories ?? [])],
            },
          }),
      ...(p.gitlabGroupId === undefined ? {} : { gitlabGroupId: p.gitlabGroupId }),
      ...(p.gitlabProjectId === undefined ? {} : { gitlabProjectId: p.gitlabProjectId }),
      ...(p.gitlabWebhookId === undefined ? {} : { gitlabWebhookId: p.gitlabWebhookId }),
      ...(p.scaleSetName === undefined && p.scaleSetRunnerGroup === undefined
        ? {}
        : { scaleSet: { name: p.scaleSetName as string, runnerGroup: p.scaleSetRunnerGroup ?? FLEET_DEFAULTS.scaleSetRunnerGroup } }),
    })),
    metrics: {
      namespace: input.metricNamespace ?? fleetMetricNamespace(prefix),
      names: METRIC_NAMES,
      dimensions: METRIC_DIMENSIONS,
    },
  };
  validateFleetConfig(config);
  return config;
}

/** Reads the FleetConfig a Lambda receives (SSM parameter or environment), validating all of it. */
export function parseFleetConfig(text: string): FleetConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error('fleet config is not JSON');
  }
  validateFleetConfig(raw);
  return raw;
}

export function poolByName(config: FleetConfig, name: string): PoolConfig | undefined {
  return config.pools.find((p) => p.name === name);
}

/** A pool's `reuse`: the scope its provider supports, the limits, the cache directories. */
function validateReuse(c: Checker, p: string, provider: unknown): void {
  const scope = c.at(`${p}.reuse.scope`);
  if (isProvider(provider) && scope !== REUSE_SCOPE_OF[provider]) {
    c.fail(`${p}.reuse.scope`, `is "${String(scope)}", but a ${provider} pool shares caches only within one ${REUSE_SCOPE_OF[provider]} ("${REUSE_SCOPE_OF[provider]}")`);
  }
  c.integer(`${p}.reuse.maxJobs`, 1, REUSE_LIMITS.maxJobs);
  c.seconds(`${p}.reuse.maxAgeSeconds`, REUSE_LIMITS.minAgeSeconds, REUSE_LIMITS.maxAgeSeconds);
  const dirs = c.strings(`${p}.reuse.cacheDirectories`, 0);
  if (dirs.length > REUSE_LIMITS.cacheDirectories) c.fail(`${p}.reuse.cacheDirectories`, `lists ${dirs.length} directories, at most ${REUSE_LIMITS.cacheDirectories}`);
  const total = dirs.reduce((sum, dir) => sum + dir.length, 0);
  if (total > REUSE_LIMITS.cacheDirectoriesTotal) c.fail(`${p}.reuse.cacheDirectories`, cacheDirectoriesTotalProblem(total).replace(/^reuse\.cacheDirectories /, ''));
  dirs.forEach((dir, k) => {
    const problem = cacheDirectoryProblem(dir);
    if (problem) c.fail(`${p}.reuse.cacheDirectories.${k}`, problem.replace(/^cache directory /, ''));
  });
  const nested = dirs.find((a) => dirs.some((b) => a !== b && a.startsWith(`${b}/`)));
  if (nested) c.fail(`${p}.reuse.cacheDirectories`, `"${nested}" lies inside another listed directory; list the outer one only`);
}

/**
 * A pool's own GitLab scope (contract gitlab-scope.ts): a group or a project, not both, only on
 * a GitLab pool; its webhook needs an owner (the pool's scope, else the connection's).
 */
function validateGitLabScope(c: Checker, p: string, provider: unknown): void {
  const keys = ['gitlabGroupId', 'gitlabProjectId', 'gitlabWebhookId'].filter((k) => c.at(`${p}.${k}`) !== undefined);
  if (keys.length === 0) return;
  if (provider !== 'gitlab') {
    c.fail(`${p}.${keys[0]}`, `is set on a ${String(provider)} pool: only a GitLab pool registers in a GitLab group or project; remove it`);
    return;
  }
  for (const k of keys) c.integer(`${p}.${k}`, 1);
  const group = c.at(`${p}.gitlabGroupId`);
  const project = c.at(`${p}.gitlabProjectId`);
  if (group !== undefined && project !== undefined) {
    c.fail(`${p}.gitlabProjectId`, 'is set together with gitlabGroupId: a runner is registered in a group or in a project; set one');
  }
  const connectionScoped = c.at('gitlab.runnerType') !== GitLabRunnerType.INSTANCE;
  if (c.at(`${p}.gitlabWebhookId`) !== undefined && group === undefined && project === undefined && !connectionScoped) {
    c.fail(`${p}.gitlabWebhookId`, 'needs an owner: set the pool\'s gitlabGroupId or gitlabProjectId (instance runners have no group or project whose webhook it could be)');
  }
}

/**
 * A scale set's name: what workflows put in `runs-on`, compared case-insensitively. GitHub
 * publishes no bound of its own; actions-runner-controller's chart refuses a name above 45
 * characters (charts/gha-runner-scale-set/templates/_helpers.tpl, "Autoscaling runner set name
 * must have up to 45 characters"), so a name that works there works here. The characters are
 * those of a label (LABEL_PATTERN).
 */
export const SCALE_SET_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,44}$/;
/** A runner group's name (GitHub's form takes up to 100 characters). */
const RUNNER_GROUP_PATTERN = /^[^\p{Cc}]{1,100}$/u;

/**
 * A pool's `scaleSet` (docs/scale-set.md): GitHub pools only; a scale set lives at an
 * organisation or at one repository (never an enterprise: the listener's App cannot open its
 * sessions there); two scale sets of one name in one scope would take each other's jobs; no
 * reuse, whose cache boundary needs the job's repository before the runner starts, which a
 * scale-set runner learns only when GitHub hands it a job. `seen` maps each scope and name to
 * the pool that took it.
 */
function validateScaleSet(c: Checker, p: string, provider: unknown, seen: Map<string, string>): void {
  if (provider !== 'github') {
    c.fail(`${p}.scaleSet.name`, `is set on a ${String(provider)} pool: only a GitHub pool can be a runner scale set; remove it`);
    return;
  }
  const name = c.at(`${p}.scaleSet.name`);
  if (name === undefined) {
    c.fail(`${p}.scaleSet.name`, 'is missing: a runner group is set for a scale set the pool does not name; name the scale set, or remove the runner group');
  } else if (typeof name !== 'string' || !SCALE_SET_NAME_PATTERN.test(name)) {
    c.fail(`${p}.scaleSet.name`, `${JSON.stringify(name)} must be 1-45 characters of letters, digits, "_", "." or "-", starting with a letter or digit (what workflows put in runs-on)`);
  } else if (name.toLowerCase() === 'self-hosted') {
    c.fail(`${p}.scaleSet.name`, '"self-hosted" is the label every self-hosted runner carries: name the scale set after what its runners are');
  }
  const group = c.at(`${p}.scaleSet.runnerGroup`);
  if (typeof group !== 'string' || !RUNNER_GROUP_PATTERN.test(group)) c.fail(`${p}.scaleSet.runnerGroup`, `${JSON.stringify(group)} must be a runner group's name, 1-100 characters`);
  if (c.at(`${p}.reuse`) !== undefined) {
    c.fail(
      `${p}.reuse`,
      'is set on a scale-set pool: reuse offers a parked instance only to a job of the repository whose caches it carries, but a scale-set runner learns its job only when GitHub hands it one; remove reuse, or serve the pool from webhooks (no scaleSet)',
    );
  }
  const pool = (c.at(p) ?? {}) as GitHubScopeFields & { readonly name?: unknown };
  const scope = githubPoolScope((c.at('github') ?? {}) as GitHubScopeFields, pool);
  if (scope.enterprise !== undefined) {
    c.fail(`${p}.scaleSet.name`, `is set on a pool whose runners register at the enterprise "${scope.enterprise}": a scale set belongs to an organisation or a repository; register the pool at its organisation (no enterprise) or serve it from webhooks`);
    return;
  }
  let where: string;
  if (scope.organization !== undefined) where = `organisation ${scope.organization}`;
  else if (scope.repositories.length === 1) where = `repository ${scope.repositories[0]}`;
  else {
    c.fail(
      `${p}.scaleSet.name`,
      `is set on a pool that serves ${scope.repositories.length} repositories: a scale set belongs to an organisation or to one repository; give the pool organization, or one repository (one scale-set pool per repository)`,
    );
    return;
  }
  if (typeof name !== 'string') return;
  const key = `${where.toLowerCase()}|${name.toLowerCase()}`;
  const other = seen.get(key);
  // Names are compared as runs-on compares labels: case-insensitively.
  if (other !== undefined) c.fail(`${p}.scaleSet.name`, `"${name}" is also the scale set of pool "${other}" in ${where}: a workflow's runs-on could not tell them apart; give each its own name`);
  else seen.set(key, typeof pool.name === 'string' ? pool.name : p);
}

/** A scale set as the clash checks see it: its pool's index and name, its name, where it lives. */
interface PlacedScaleSet {
  readonly index: number;
  readonly pool: string;
  readonly name: string;
  readonly organization?: string;
  readonly repository?: string;
}

function placedScaleSets(c: Checker, pools: readonly unknown[]): PlacedScaleSet[] {
  const connection = (c.at('github') ?? {}) as GitHubScopeFields;
  return pools.flatMap((raw, index) => {
    const pool = (raw ?? {}) as GitHubScopeFields & { readonly name?: unknown; readonly provider?: unknown; readonly scaleSet?: { readonly name?: unknown } };
    const name = pool.scaleSet?.name;
    if (pool.provider !== 'github' || typeof name !== 'string') return [];
    const scope = githubPoolScope(connection, pool);
    if (scope.enterprise !== undefined) return [];
    const where = scope.organization !== undefined ? { organization: scope.organization } : scope.repositories.length === 1 ? { repository: scope.repositories[0]! } : undefined;
    return where ? [{ index, pool: typeof pool.name === 'string' ? pool.name : `pools.${index}`, name, ...where }] : [];
  });
}

const inOrganisation = (repository: string, organization: string) => repository.split('/')[0]!.toLowerCase() === organization.toLowerCase();

function overlaps(set: PlacedScaleSet, scope: GitHubPoolScope): boolean {
  if (scope.enterprise !== undefined) return true; // an enterprise's runners may take any of its organisations' jobs
  if (set.organization !== undefined) {
    return (scope.organization !== undefined && scope.organization.toLowerCase() === set.organization.toLowerCase()) || scope.repositories.some((r) => inOrganisation(r, set.organization!));
  }
  const [owner = '', repo = ''] = set.repository!.split('/');
  return scopeServesRepository(scope, owner, repo);
}

/**
 * Clashes between pools that validateScaleSet cannot see one pool at a time (docs/scale-set.md):
 * - an organisation's scale set and a scale set of one of its repositories with the same name:
 *   a job of that repository naming it could be assigned to either;
 * - a webhook GitHub pool whose labels include a scale set's name in a scope it shares: a job
 *   asking for that label is the scale set's (match-pool.ts leaves it alone), so the label
 *   could never bring the pool a job.
 */
function validateScaleSetClashes(c: Checker, pools: readonly unknown[]): void {
  const sets = placedScaleSets(c, pools);
  const where = (s: PlacedScaleSet) => (s.organization !== undefined ? `organisation ${s.organization}` : `repository ${s.repository}`);
  for (const repoSet of sets.filter((s) => s.repository !== undefined)) {
    const orgSet = sets.find((s) => s.organization !== undefined && s.name.toLowerCase() === repoSet.name.toLowerCase() && inOrganisation(repoSet.repository!, s.organization));
    if (orgSet) {
      c.fail(
        `pools.${repoSet.index}.scaleSet.name`,
        `"${repoSet.name}" is also the scale set of pool "${orgSet.pool}" in ${where(orgSet)}, which holds ${where(repoSet)}: GitHub could assign a job of that repository naming it to either; give each its own name`,
      );
    }
  }
  const connection = (c.at('github') ?? {}) as GitHubScopeFields;
  pools.forEach((raw, index) => {
    const pool = (raw ?? {}) as GitHubScopeFields & { readonly provider?: unknown; readonly scaleSet?: unknown; readonly labels?: unknown };
    if (pool.provider !== 'github' || pool.scaleSet !== undefined || !Array.isArray(pool.labels)) return;
    const scope = githubPoolScope(connection, pool);
    for (const label of pool.labels) {
      if (typeof label !== 'string') continue;
      const set = sets.find((s) => s.name.toLowerCase() === label.toLowerCase() && overlaps(s, scope));
      if (set) {
        c.fail(
          `pools.${index}.labels`,
          `include "${label}", the name of pool "${set.pool}"'s scale set in ${where(set)}: a job asking for it is the scale set's (the webhook leaves it alone), so the label could never bring this pool a job; remove the label, or rename the scale set`,
        );
      }
    }
  });
}

export function validateFleetConfig(value: unknown): asserts value is FleetConfig {
  const c = new Checker(value);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('fleet config must be a JSON object');
  if (c.at('version') !== FLEET_CONFIG_VERSION) c.fail('version', `must be ${FLEET_CONFIG_VERSION} (this code reads version ${FLEET_CONFIG_VERSION} only)`);
  const prefix = c.string('prefix');
  if (prefix !== undefined) {
    const problem = prefixProblem(prefix);
    if (problem) c.fail('prefix', problem.replace(/^prefix /, ''));
    else {
      const paths = ssmPaths(prefix);
      if (c.at('parameters.runnerConfigRoot') !== paths.runnerConfigRoot) c.fail('parameters.runnerConfigRoot', `must be "${paths.runnerConfigRoot}"`);
      c.string('parameters.fleetConfig');
      for (const key of ['appPrivateKey', 'webhookSecret']) c.string(`parameters.github.${key}`);
      for (const key of ['token', 'webhookToken', 'webhookSigningKey']) c.string(`parameters.gitlab.${key}`);
      if (c.at('parameters.kmsKeyId') !== undefined) c.string('parameters.kmsKeyId');
    }
  }
  if (c.at('github') !== undefined) {
    const appId = c.string('github.appId');
    if (appId !== undefined && !GITHUB_APP_ID_PATTERN.test(appId)) c.fail('github.appId', `must be the App's numeric id (its settings page shows "App ID"), got "${appId}"`);
    if (c.at('github.additionalAppIds') !== undefined) {
      const seen = new Set(appId === undefined ? [] : [appId]);
      c.strings('github.additionalAppIds', 0).forEach((id, i) => {
        if (!GITHUB_APP_ID_PATTERN.test(id)) c.fail(`github.additionalAppIds[${i}]`, `must be an App's numeric id (its settings page shows "App ID"), got "${id}"`);
        else if (seen.has(id)) c.fail(`github.additionalAppIds[${i}]`, `App ${id} is listed twice (appId and additionalAppIds together name each App once)`);
        seen.add(id);
      });
    }
    // Organisations, repositories and enterprises: fleetScopeProblems below.
    c.strings('github.repositories', 0);
    c.integer('github.runnerGroupId', 1);
    const api = c.string('github.apiUrl');
    if (api !== undefined && !/^https?:\/\//.test(api)) c.fail('github.apiUrl', `must be an http(s) URL, got "${api}"`);
  }
  if (c.at('gitlab') !== undefined) {
    const url = c.string('gitlab.url');
    if (url !== undefined && !/^https?:\/\/[^/]/.test(url)) c.fail('gitlab.url', `must be an http(s) URL such as "https://gitlab.com", got "${url}"`);
    const type = c.at('gitlab.runnerType');
    if (!GITLAB_RUNNER_TYPES.includes(type as string)) c.fail('gitlab.runnerType', `must be one of ${GITLAB_RUNNER_TYPES.join(', ')}`);
    else if (type !== GitLabRunnerType.INSTANCE) c.integer('gitlab.scopeId', 1);
    if (c.at('gitlab.webhook') !== undefined) {
      const owner = c.at('gitlab.webhook.owner');
      if (!Object.values(GitLabWebhookOwner).includes(owner as GitLabWebhookOwner)) c.fail('gitlab.webhook.owner', 'must be "project" or "group"');
      c.integer('gitlab.webhook.ownerId', 1);
      c.integer('gitlab.webhook.hookId', 1);
    }
    const projects = c.at('gitlab.reconcileProjectIds');
    if (projects !== undefined && !Array.isArray(projects)) c.fail('gitlab.reconcileProjectIds', 'must list positive integer project ids');
    else if (projects !== undefined) projects.forEach((_id, k) => c.integer(`gitlab.reconcileProjectIds.${k}`, 1));
  }
  const pools = c.at('pools');
  if (!Array.isArray(pools) || pools.length === 0) c.fail('pools', 'must list at least one pool');
  // Organisations, repositories, enterprises of the connection and the pools (github-scope.ts).
  for (const [path, why] of fleetScopeProblems(c.at('github') as Record<string, unknown> | undefined, Array.isArray(pools) ? pools : [])) c.fail(path, why);
  const seen = new Set<string>();
  const scaleSets = new Map<string, string>();
  (Array.isArray(pools) ? pools : []).forEach((_pool, i) => {
    const p = `pools.${i}`;
    const before = c.problems.length;
    const name = c.string(`${p}.name`);
    if (name !== undefined) {
      const problem = poolNameProblem(name);
      if (problem) c.fail(`${p}.name`, problem.replace(/^pool name /, ''));
      if (seen.has(name)) c.fail(`${p}.name`, `"${name}" is used by two pools; pool names must be unique`);
      seen.add(name);
    }
    const provider = c.at(`${p}.provider`);
    if (!isProvider(provider)) c.fail(`${p}.provider`, `must be one of ${PROVIDERS.join(', ')}`);
    else if (c.at(provider) === undefined) {
      c.fail(`${p}.provider`, `is "${provider}" but no ${provider} connection is configured; add one or change the pool's provider`);
    }
    // Labels default to the name: a bad name would be reported again as a bad label.
    const labels = c.at(`${p}.labels`);
    const nameFailed = c.problems.slice(before).some((x) => x.path === `${p}.name`);
    const defaulted = nameFailed && Array.isArray(labels) && labels.length === 1 && labels[0] === c.at(`${p}.name`);
    if (!defaulted) c.strings(`${p}.labels`, 0).forEach((label, k) => {
      if (!LABEL_PATTERN.test(label)) c.fail(`${p}.labels.${k}`, `"${label}" must be 1-64 characters of letters, digits, "_", ".", ":", "+" or "-", starting with a letter or digit`);
    });
    const match = c.at(`${p}.labelMatch`);
    if (!LABEL_MATCHES.includes(match as string)) c.fail(`${p}.labelMatch`, `must be ${LABEL_MATCHES.map((m) => `"${m}"`).join(' or ')}`);
    c.boolean(`${p}.runUntagged`);
    if (c.at(`${p}.requireSelfHostedLabel`) !== undefined) c.boolean(`${p}.requireSelfHostedLabel`);
    c.string(`${p}.launchTemplateId`);
    c.string(`${p}.launchTemplateVersion`);
    c.strings(`${p}.subnetIds`, 1);
    c.strings(`${p}.instanceTypes`, 1);
    c.boolean(`${p}.spot`);
    // 0 pauses the pool: no job starts, no standby is kept (lambdas/pool `warmTarget`).
    const max = c.integer(`${p}.maxRunners`, 0, 10_000);
    c.seconds(`${p}.idleTimeoutSeconds`, 60);
    if (c.at(`${p}.idleConfirmSeconds`) !== undefined) c.seconds(`${p}.idleConfirmSeconds`, 0, 24 * 60 * 60);
    if (c.at(`${p}.maxJobSeconds`) !== undefined) c.seconds(`${p}.maxJobSeconds`, 60, 30 * 24 * 60 * 60);
    if (c.at(`${p}.bootWaitSeconds`) !== undefined) c.seconds(`${p}.bootWaitSeconds`, 1, 86_400);
    const size = c.integer(`${p}.warm.size`, 0, 10_000);
    // A paused pool (maxRunners 0) keeps its warm settings for when it resumes.
    if (size !== undefined && max !== undefined && max > 0 && size > max) {
      c.fail(`${p}.warm.size`, `is ${size}, above the pool's maxRunners ${max}; lower it or raise maxRunners`);
    }
    const schedule = c.at(`${p}.warm.schedule`);
    if (!Array.isArray(schedule)) c.fail(`${p}.warm.schedule`, 'must be a list (empty for none)');
    else
      schedule.forEach((_entry, j) => {
        const window = c.string(`${p}.warm.schedule.${j}.window`);
        if (window !== undefined) {
          try {
            parseWarmWindow(window);
          } catch (e) {
            c.fail(`${p}.warm.schedule.${j}.window`, (e as Error).message.replace(/^warm schedule window /, ''));
          }
        }
        const entrySize = c.integer(`${p}.warm.schedule.${j}.size`, 0, 10_000);
        if (entrySize !== undefined && max !== undefined && max > 0 && entrySize > max) {
          c.fail(`${p}.warm.schedule.${j}.size`, `is ${entrySize}, above the pool's maxRunners ${max}`);
        }
      });
    c.seconds(`${p}.warm.maxAgeSeconds`, 300);
    const priming = c.seconds(`${p}.warm.primingTimeoutSeconds`, 60);
    if (priming !== undefined && launchTicketHoldSeconds(priming) >= JOB_MAX_WAIT_SECONDS) {
      c.fail(
        `${p}.warm.primingTimeoutSeconds`,
        `is ${secondsInWords(priming)}: a launch of an unproven or failing template holds its launch ticket for the priming timeout plus ${secondsInWords(LAUNCH_TICKET_SETTLE_SECONDS)}, ` +
          `which must stay below a job's maximum wait (${secondsInWords(JOB_MAX_WAIT_SECONDS)}) or the jobs waiting behind it are dead-lettered; ` +
          `use less than ${secondsInWords(JOB_MAX_WAIT_SECONDS - LAUNCH_TICKET_SETTLE_SECONDS)}, and put slow preparation into the image`,
      );
    }
    c.integer(`${p}.warm.primeFailureLimit`, 1, 100);
    c.seconds(`${p}.warm.primeBackoffCapSeconds`, 60, 24 * 60 * 60);
    if (c.at(`${p}.imageParameter`) !== undefined) c.string(`${p}.imageParameter`);
    if (c.at(`${p}.runnerVersion`) !== undefined) c.string(`${p}.runnerVersion`);
    if (c.at(`${p}.reuse`) !== undefined) validateReuse(c, p, provider);
    validateGitLabScope(c, p, provider);
    if (c.at(`${p}.scaleSet`) !== undefined) validateScaleSet(c, p, provider, scaleSets);
  });
  if (Array.isArray(pools)) validateScaleSetClashes(c, pools);
  const namespace = c.string('metrics.namespace');
  const namespaceProblem = namespace === undefined ? undefined : metricNamespaceProblem(namespace);
  if (namespaceProblem) c.fail('metrics.namespace', namespaceProblem.replace(/^metricNamespace /, ''));
  if (c.problems.length > 0) throw new FleetConfigError(c.problems);
}
