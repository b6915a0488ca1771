import { PROVIDERS, type Provider } from './boot';
import { assertPrefix, INSTANCE_ID_PATTERN } from './names';

/** Names of the SSM parameters holding the GitHub App's secrets. */
export interface GitHubParameterNames {
  /** PEM private key of the GitHub App (SecureString). */
  readonly appPrivateKey: string;
  /** Secret the GitHub webhook is signed with (SecureString). */
  readonly webhookSecret: string;
}

/** Names of the SSM parameters holding the GitLab secrets. */
export interface GitLabParameterNames {
  /** Token with the create_runner scope (SecureString). */
  readonly token: string;
  /** Secret token GitLab sends in X-Gitlab-Token (SecureString). */
  readonly webhookToken: string;
  /** Optional Standard Webhooks signing key, "whsec_<base64>" (SecureString). */
  readonly webhookSigningKey: string;
}

/**
 * SSM parameter names. `/<prefix>/runners/config/<instance-id>` holds the runner start
 * config for exactly one instance (SecureString, written by scale-up, read and deleted by
 * that instance); `/<prefix>/ci/...` holds the CI credentials the operator puts in.
 */
export interface SsmPaths {
  /** Path under which every runner config lives, with a trailing "/". */
  readonly runnerConfigRoot: string;
  /** Path under which every CI credential lives, with a trailing "/". */
  readonly ciRoot: string;
  /** Path under which each pool's run-time state lives (`primeState`), with a trailing "/". */
  readonly poolStateRoot: string;
  /** Path under which the resolved runner releases live (`runnerRelease`), with a trailing "/". */
  readonly runnerReleaseRoot: string;
  /** The String parameter that carries the `FleetConfig` to the Lambdas. */
  readonly fleetConfig: string;
  /** The String parameter holding the fleet's extra CA certificates (PEM), which the instances install at boot. */
  readonly caCertificates: string;
  readonly github: GitHubParameterNames;
  /**
   * Classic personal access token with `manage_runners:enterprise` (SecureString), read only
   * when a pool's runners register at an enterprise: GitHub's enterprise runner endpoints take
   * no App token (docs/github.md, "Enterprise runners"). Outside the FleetConfig's `parameters`,
   * which every fleet carries.
   */
  readonly githubEnterpriseToken: string;
  readonly gitlab: GitLabParameterNames;
  /**
   * The SecureString holding the PEM private key of an additional GitHub App (`github.additionalAppIds`);
   * the first App's key stays at `github.appPrivateKey`, so a fleet that adds an App keeps its parameter.
   */
  githubAppPrivateKey(appId: string): string;
  /** Name of the config parameter of one instance. */
  runnerConfig(instanceId: string): string;
  /** The String parameter holding one pool's prime-failure streak (written by the pool Lambda only; scale-up reads it before cold launches). */
  primeState(pool: string): string;
  /**
   * The String parameter holding the newest good release of one provider's runner
   * (`encodeRunnerRelease`): written by the release resolver only, read by the pool Lambda and
   * by the boot of a pool that follows the newest release.
   */
  runnerRelease(provider: Provider): string;
  /** The instance id a runner config parameter name belongs to, or undefined for any other name. */
  instanceIdOf(parameterName: string): string | undefined;
}

/** A GitHub App id as GitHub shows it on the App's settings page: digits. */
export const GITHUB_APP_ID_PATTERN = /^\d{1,20}$/;

/** Tag on every runner config parameter naming its instance; IAM ties it to the calling instance. */
export const PARAMETER_INSTANCE_TAG = 'instance-id';

/**
 * Tag on every runner config parameter holding its instance's ARN: the instance role's IAM
 * condition compares it with `ec2:SourceInstanceARN`, so an instance reads and deletes only
 * its own config. Written in the same PutParameter as the config (the claim).
 */
export const PARAMETER_INSTANCE_ARN_TAG = 'instance-arn';

/** The ARN of an EC2 instance, as `ec2:SourceInstanceARN` names it. */
export function instanceArn(partition: string, region: string, account: string, instanceId: string): string {
  if (!/^aws(-[a-z]+)*$/.test(partition)) throw new Error(`"${partition}" is not an AWS partition (aws, aws-cn, aws-us-gov, ...)`);
  if (!/^[a-z]{2}(-[a-z]+)+-\d+$/.test(region)) throw new Error(`"${region}" is not an AWS region (e.g. eu-west-1)`);
  if (!/^\d{12}$/.test(account)) throw new Error(`"${account}" is not a 12-digit AWS account id`);
  if (!INSTANCE_ID_PATTERN.test(instanceId)) throw new Error(`"${instanceId}" is not an EC2 instance id`);
  return `arn:${partition}:ec2:${region}:${account}:instance/${instanceId}`;
}

/**
 * Parses the `INSTANCE_ARN_PREFIX` value (`arn:aws:ec2:eu-west-1:111122223333:instance/`)
 * into a function from instance id to ARN, failing with a message that names the bad value.
 */
export function instanceArnOf(prefix: string): (instanceId: string) => string {
  const m = /^arn:([^:]+):ec2:([^:]+):([^:]+):instance\/$/.exec(prefix);
  if (!m) throw new Error(`instance ARN prefix "${prefix}" must look like "arn:aws:ec2:eu-west-1:111122223333:instance/"`);
  const [, partition, region, account] = m as unknown as [string, string, string, string];
  instanceArn(partition, region, account, 'i-00000000');
  return (instanceId) => instanceArn(partition, region, account, instanceId);
}

export function ssmPaths(prefix: string): SsmPaths {
  assertPrefix(prefix);
  const runnerConfigRoot = `/${prefix}/runners/config/`;
  const ciRoot = `/${prefix}/ci/`;
  const poolStateRoot = `/${prefix}/pools/`;
  const runnerReleaseRoot = `/${prefix}/runners/release/`;
  return {
    runnerConfigRoot,
    ciRoot,
    poolStateRoot,
    runnerReleaseRoot,
    fleetConfig: `/${prefix}/fleet/config`,
    githubEnterpriseToken: `${ciRoot}github/enterprise-token`,
    caCertificates: `/${prefix}/fleet/ca-certificates`,
    github: {
      appPrivateKey: `${ciRoot}github/app-private-key`,
      webhookSecret: `${ciRoot}github/webhook-secret`,
    },
    gitlab: {
      token: `${ciRoot}gitlab/runner-token`,
      webhookToken: `${ciRoot}gitlab/webhook-token`,
      webhookSigningKey: `${ciRoot}gitlab/webhook-signing-key`,
    },
    githubAppPrivateKey(appId: string): string {
      if (!GITHUB_APP_ID_PATTERN.test(appId)) throw new Error(`"${appId}" is not a GitHub App id (digits)`);
      return `${ciRoot}github/apps/${appId}/private-key`;
    },
    runnerConfig(instanceId: string): string {
      if (!INSTANCE_ID_PATTERN.test(instanceId)) throw new Error(`"${instanceId}" is not an EC2 instance id`);
      return `${runnerConfigRoot}${instanceId}`;
    },
    primeState(pool: string): string {
      return `${poolStateRoot}${pool}/prime-state`;
    },
    runnerRelease(provider: Provider): string {
      if (!(PROVIDERS as readonly string[]).includes(provider)) throw new Error(`"${String(provider)}" is not a provider (${PROVIDERS.join(', ')})`);
      return `${runnerReleaseRoot}${provider}`;
    },
    instanceIdOf(parameterName: string): string | undefined {
      if (!parameterName.startsWith(runnerConfigRoot)) return undefined;
      const id = parameterName.slice(runnerConfigRoot.length);
      return INSTANCE_ID_PATTERN.test(id) ? id : undefined;
    },
  };
}
