/**
 * The launch templates of the local sandbox: the same user data as production, rendered by
 * lib/user-data.ts, for a machine that is a directory on this host. Every host path lives
 * under `TEMPLATE_ROOT` and IMDS is the loopback placeholder `TEMPLATE_IMDS`; the player
 * relocates both into each played instance's own sandbox directory and IMDS server
 * (`relocateUserData`). That relocation is the one difference from what a real machine runs.
 */
import {
  CreateLaunchTemplateCommand,
  CreateLaunchTemplateVersionCommand,
  ModifyLaunchTemplateCommand,
  type EC2Client,
  type RequestLaunchTemplateData,
} from '@aws-sdk/client-ec2';
import type { PoolReuseConfig, Provider, RunnerPackage } from '../../lambdas/shared/contract';
import type { PoolDockerProps } from '../../lib/props';
import { encodeUserData, renderUserData, type UserDataOptions } from '../../lib/user-data';
import { RUNNER_USER_PLACEHOLDER } from './runner-users';

export interface LocalPoolTemplate {
  name: string;
  provider: Provider;
  prepareCommands?: readonly string[];
  /** @default 'nobody' when this process runs as root, else the current user (see `localRunnerUser`) */
  runnerUser?: string;
  /**
   * What the install step fetches on a stock image (the pool's `runnerPackage` prop): the
   * loopback release server's packages. @default - the contract's pinned release
   */
  runnerPackage?: RunnerPackage;
  /** The install step reads the resolved release (the pool follows the newest one). @default false */
  followLatestRunner?: boolean;
  /**
   * The pool's reuse (the FleetConfig's): its machines clean and park after a job, keeping the
   * cache directories (paths under TEMPLATE_ROOT, relocated like every host path).
   * @default - none: every machine serves one job and terminates
   */
  reuse?: PoolReuseConfig;
  /** The pool's Docker (its `docker` prop), kept only by `npm run local -- --docker`. @default - none */
  docker?: PoolDockerProps;
  /**
   * The pool's image: the player plays an instance of `LOCAL_APT_IMAGE_ID` as an Ubuntu-style
   * machine (no dnf: the install step's apt-get is this host's). @default LOCAL_IMAGE_ID
   */
  imageId?: string;
}

export interface LocalMachineSettings {
  prefix: string;
  /** The aws CLI's --endpoint-url (moto, or a proxy in front of it). */
  awsEndpoint: string;
  /** Each played instance gets `<sandboxRoot>/<instance-id>/`. */
  sandboxRoot: string;
  /**
   * How many times slower than an unloaded machine this host runs (test/support/slowdown.ts):
   * the boot script's time bounds are scaled by it (`localTimeBounds`).
   * @default 1
   */
  slowdown?: number;
  /**
   * The runner user every template names, when a pool names none: `RUNNER_USER_PLACEHOLDER`
   * (runner-users.ts) when each played machine gets a user of its own, which its relocation
   * names. @default localRunnerUser()
   */
  runnerUser?: string;
}

/** Where the rendered user data puts every host path; relocated per instance. */
export const TEMPLATE_ROOT = '/cwr-local-machine';
/** Nothing listens on the discard port: an unrelocated script fails at once. */
export const TEMPLATE_IMDS = 'http://127.0.0.1:9';
/** moto accepts it in launch templates, RunInstances and CreateFleet. */
export const LOCAL_IMAGE_ID = 'ami-12c6146b';
/**
 * The image of an apt pool (`npm run local -- --apt-pool NAME`), one moto knows (its Ubuntu
 * 16.04 image): a played instance of it has no dnf, so the boot's install step runs this
 * Debian host's real apt-get, standing in for Ubuntu's.
 */
export const LOCAL_APT_IMAGE_ID = 'ami-785db401';

/** The machine layout the rendered paths use, relative to the machine directory. */
export const MACHINE_PATHS = {
  unitDir: 'etc/systemd/system',
  stateDir: 'var/lib/warm-runners',
  logFile: 'var/log/start-runner.log',
  machineIdFile: 'etc/machine-id',
  preReadDevice: 'dev/root-volume',
  dmiAssetTagFile: 'sys/board_asset_tag',
  runnerDir: 'runner',
  /** While this file exists, the first prepare command blocks: a PRIME that never finishes. */
  stallMarker: 'stall-priming',
} as const;

/**
 * The paths a reusable pool's cleaning reaches, rendered for reusable pools only (hostPaths):
 * the runner user's home (the reuse run's job plants a secret there) and the temp directories.
 */
export const REUSE_MACHINE_PATHS = {
  runnerHome: 'home/runner',
  tmpDir: 'tmp',
  varTmpDir: 'var/tmp',
  shmDir: 'dev/shm',
} as const;

/**
 * Bounds of seconds instead of minutes, as in the bats harness (test/templates/render-sandbox.ts),
 * for an unloaded machine; `localTimeBounds` scales them with the host's slowdown.
 */
export const LOCAL_TIME_BOUNDS = {
  waitSeconds: 60,
  pollSeconds: 0.3,
  retryDelaySeconds: 0.2,
  imdsAttempts: 5,
  awsAttempts: 3,
  httpTimeoutSeconds: 2,
  // Short, but well above what moto takes to answer.
  awsConnectTimeoutSeconds: 2,
  awsReadTimeoutSeconds: 5,
  awsCliMaxAttempts: 2,
  runnerWaitTimeoutSeconds: 60,
  // The install step on a stock image: a loopback download of a few kB and the dnf shim.
  downloadSeconds: 20,
  downloadRetries: 1,
  packageInstallSeconds: 20,
  // The run's own daemon answers at once; a hang catcher.
  dockerReadySeconds: 20,
  // The bound of each shipping (not an interval), at the renderer's limit and not scaled: a
  // hang catcher. Every played machine shares this host's CPU, so a pool booting at once
  // makes each aws CLI call take seconds of CPU the others want too (on a 2-core host, ten
  // concurrent calls took up to 13 s each, most over 5 s); 15 s ran out there, and the start-up slowdown
  // does not see load the run itself makes.
  logShipSeconds: 60,
} as const satisfies Partial<UserDataOptions>;

/**
 * An apt pool's package manager bound (each of `apt-get update` and `apt-get install`): the real
 * apt-get fetches from the Debian mirror, and other apt users of this host may hold its locks
 * for a while; the dnf shim of the other pools answers at once.
 */
export const LOCAL_APT_PACKAGE_SECONDS = 120;

/**
 * LOCAL_TIME_BOUNDS with every bound (not the poll and retry delays, nor the attempts) times
 * the slowdown, in whole seconds where the renderer wants them, within its limit of 60 s
 * for the timeouts (the shipping bound is at that limit already). Everything inside these
 * bounds is a few aws CLI calls or IMDS requests, and those slow down with the machine.
 */
export function localTimeBounds(slowdown = 1): Partial<UserDataOptions> {
  const b = LOCAL_TIME_BOUNDS;
  const f = Math.max(1, slowdown);
  const within60 = (s: number): number => Math.min(60, Math.ceil(s * f));
  return {
    ...b,
    waitSeconds: Math.ceil(b.waitSeconds * f),
    httpTimeoutSeconds: within60(b.httpTimeoutSeconds),
    awsConnectTimeoutSeconds: within60(b.awsConnectTimeoutSeconds),
    awsReadTimeoutSeconds: within60(b.awsReadTimeoutSeconds),
    runnerWaitTimeoutSeconds: Math.ceil(b.runnerWaitTimeoutSeconds * f),
    downloadSeconds: Math.ceil(b.downloadSeconds * f),
    packageInstallSeconds: Math.ceil(b.packageInstallSeconds * f),
    dockerReadySeconds: Math.ceil(b.dockerReadySeconds * f),
  };
}

/** The runner user: the renderer refuses root, so root runs it as nobody (as the bats harness does). */
export function localRunnerUser(): string {
  if (process.getuid?.() === 0) return 'nobody';
  return process.env.USER ?? process.env.LOGNAME ?? 'nobody';
}

/** The stall prepare command first, then the pool's own. */
function localPrepareCommands(pool: LocalPoolTemplate): string[] {
  const marker = `${TEMPLATE_ROOT}/${MACHINE_PATHS.stallMarker}`;
  return [`while test -e ${marker}; do sleep 0.2; done`, ...(pool.prepareCommands ?? [])];
}

/**
 * User data for a pool, rendered by lib/user-data.ts for a local machine (sandbox paths,
 * loopback IMDS, short time bounds scaled with the host's slowdown). The aws CLI is `aws` as in production: the player puts
 * the real one on the machine's PATH.
 */
export function renderLocalUserData(pool: LocalPoolTemplate, machine: LocalMachineSettings): string {
  const at = (relative: string): string => `${TEMPLATE_ROOT}/${relative}`;
  // A reusable pool's cleaning reaches the runner's home and the temp directories: on a
  // played machine those are its own, never this host's.
  const reuse = pool.reuse
    ? {
        reuse: pool.reuse,
        hostPaths: Object.fromEntries(Object.entries(REUSE_MACHINE_PATHS).map(([k, v]) => [k, at(v)])),
      }
    : { hostPaths: {} };
  try {
    return renderUserData({
      provider: pool.provider,
      prefix: machine.prefix,
      runnerUser: pool.runnerUser ?? machine.runnerUser ?? localRunnerUser(),
      runnerDir: at(MACHINE_PATHS.runnerDir),
      gitlabRunnerBinary: at(`${MACHINE_PATHS.runnerDir}/gitlab-runner`),
      prepareCommands: localPrepareCommands(pool),
      ...(pool.runnerPackage ? { runnerPackage: pool.runnerPackage } : {}),
      ...(pool.followLatestRunner ? { followLatestRunner: true } : {}),
      ...localTimeBounds(machine.slowdown),
      ...(pool.imageId === LOCAL_APT_IMAGE_ID ? { packageInstallSeconds: Math.ceil(LOCAL_APT_PACKAGE_SECONDS * Math.max(1, machine.slowdown ?? 1)) } : {}),
      hostPaths: {
        unitDir: at(MACHINE_PATHS.unitDir),
        hookPath: at(`usr/local/sbin/${machine.prefix}-start-runner`),
        stateDir: at(MACHINE_PATHS.stateDir),
        logFile: at(MACHINE_PATHS.logFile),
        machineIdFile: at(MACHINE_PATHS.machineIdFile),
        preReadDevice: at(MACHINE_PATHS.preReadDevice),
        dmiAssetTagFile: at(MACHINE_PATHS.dmiAssetTagFile),
        ...reuse.hostPaths,
      },
      ...(reuse.reuse ? { reuse: reuse.reuse } : {}),
      ...(pool.docker ? { docker: pool.docker } : {}),
      imdsEndpoint: TEMPLATE_IMDS,
      awsCli: 'aws',
      awsEndpointUrl: machine.awsEndpoint,
    });
  } catch (e) {
    throw new Error(`pool "${pool.name}": ${(e as Error).message}`);
  }
}

/** Paths the relocated script may hold unquoted: the renderer's own path alphabet. */
const SANDBOX_PATH = /^\/[A-Za-z0-9._/+-]*[A-Za-z0-9._+-]$/;

/**
 * The user data as this instance runs it: the template root becomes its machine directory,
 * the placeholder IMDS its own IMDS server, and with `runnerUser` the placeholder runner user
 * (`RUNNER_USER_PLACEHOLDER`) its own user. On EC2 the same text runs unchanged; here many
 * machines share one host, so each needs its own paths, metadata service and runner user.
 */
export function relocateUserData(userData: string, machineDir: string, imdsUrl: string, runnerUser?: string): string {
  if (!SANDBOX_PATH.test(machineDir) || machineDir.includes('//')) {
    throw new Error(`machine directory "${machineDir}" must be an absolute path of letters, digits, ".", "_", "+", "-" and single "/"`);
  }
  if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(imdsUrl)) throw new Error(`IMDS URL "${imdsUrl}" must be http://127.0.0.1:PORT`);
  if (!userData.includes(`${TEMPLATE_ROOT}/`)) {
    throw new Error(`the user data holds no path under ${TEMPLATE_ROOT}: it was not rendered by renderLocalUserData`);
  }
  let text = userData;
  if (runnerUser !== undefined) {
    if (!/^[a-z][a-z0-9-]{0,31}$/.test(runnerUser)) throw new Error(`runner user "${runnerUser}" must be a Linux user name of at most 32 characters`);
    // Whole words only: as the renderer quotes it, the name stands alone.
    const placeholder = new RegExp(`(?<![A-Za-z0-9_-])${RUNNER_USER_PLACEHOLDER}(?![A-Za-z0-9_-])`, 'g');
    if (!placeholder.test(text)) throw new Error(`the user data names no ${RUNNER_USER_PLACEHOLDER}: it was rendered for a shared runner user`);
    text = text.replace(placeholder, runnerUser);
  }
  return text
    .split(`${TEMPLATE_ROOT}/`)
    .join(`${machineDir}/`)
    .replace(new RegExp(`${TEMPLATE_IMDS.replace(/\./g, '\\.')}(?![0-9])`, 'g'), imdsUrl);
}

function templateData(pool: LocalPoolTemplate, machine: LocalMachineSettings): RequestLaunchTemplateData {
  // What lib/runner-fleet.ts sets that matters to the boot: IMDSv2, tags in instance
  // metadata, and a power-off that stops (parks) the instance.
  return {
    ImageId: pool.imageId ?? LOCAL_IMAGE_ID,
    InstanceType: 't3.micro',
    // Encoded as lib/runner-fleet.ts does (gzip, then base64): the player reads it back like cloud-init.
    UserData: encodeUserData(renderLocalUserData(pool, machine)),
    MetadataOptions: { HttpTokens: 'required', HttpEndpoint: 'enabled', HttpPutResponseHopLimit: 1, InstanceMetadataTags: 'enabled' },
    InstanceInitiatedShutdownBehavior: 'stop',
  };
}

export async function createLocalLaunchTemplate(
  ec2: EC2Client,
  pool: LocalPoolTemplate,
  machine: LocalMachineSettings,
): Promise<{ launchTemplateId: string; launchTemplateName: string; version: string }> {
  const launchTemplateName = `${machine.prefix}-${pool.name}`;
  const out = await ec2.send(new CreateLaunchTemplateCommand({ LaunchTemplateName: launchTemplateName, LaunchTemplateData: templateData(pool, machine) }));
  const id = out.LaunchTemplate?.LaunchTemplateId;
  if (!id) throw new Error(`CreateLaunchTemplate ${launchTemplateName} returned no id`);
  return { launchTemplateId: id, launchTemplateName, version: String(out.LaunchTemplate?.LatestVersionNumber ?? 1) };
}

/** A new version of the pool's template, made the default (what a CDK deploy of changed user data does). */
export async function updateLocalLaunchTemplate(
  ec2: EC2Client,
  launchTemplateId: string,
  pool: LocalPoolTemplate,
  machine: LocalMachineSettings,
): Promise<{ version: string }> {
  const out = await ec2.send(new CreateLaunchTemplateVersionCommand({ LaunchTemplateId: launchTemplateId, LaunchTemplateData: templateData(pool, machine) }));
  const version = out.LaunchTemplateVersion?.VersionNumber;
  if (version === undefined) throw new Error(`CreateLaunchTemplateVersion ${launchTemplateId} returned no version`);
  await ec2.send(new ModifyLaunchTemplateCommand({ LaunchTemplateId: launchTemplateId, DefaultVersion: String(version) }));
  return { version: String(version) };
}
