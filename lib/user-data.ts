import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import {
  BOOT_LOG_KEYS,
  FLEET_DEFAULTS,
  DEFAULT_PREFIX,
  LEDGER_LOG_KEYS,
  INSTANCE_ID_PATTERN,
  PROVIDERS,
  JOB_START_LINES,
  RUNNER_CONFIG_KEYS,
  RUNNER_CONFIG_VERSION,
  bootLogGroupName,
  WARM_STANDBY_VALUE,
  prefixProblem,
  DEFAULT_RUNNER_PACKAGES,
  RUNNER_OS_PACKAGES,
  PackageManager,
  runnerPackageProblems,
  ssmPaths,
  tagKeys,
  Provider,
  AFFINITY_PATTERN,
  cacheDirectoryProblem,
  cacheDirectoriesTotalProblem,
  REUSE_LIMITS,
  type PoolReuseConfig,
  type BootMode,
  type RunnerPackage,
  type LedgerStage,
} from '../lambdas/shared/contract';
import { DockerPullPolicy, GitLabExecutor, type PoolDockerProps } from './props';

/**
 * Renders the boot script of a runner instance (templates/): the start logic, its systemd
 * hook and the user data that runs it on the first boot. Every value the control plane
 * shares with the instance comes from the contract; every host path and time bound is an
 * option with a production default, so the bats harness runs the same script in a sandbox.
 */

/**
 * EC2 limits user data to 16 KB "in raw form, before it is base64-encoded" (EC2 user guide,
 * "Work with instance user data"). The launch template carries the script gzip-compressed
 * (`encodeUserData`; cloud-init decompresses gzip user data before acting on it: cloud-init
 * docs, "User data formats"), so the limit applies to the compressed bytes, not to the
 * script's text nor to the base64 form (about 4/3 larger).
 */
export const USER_DATA_LIMIT_BYTES = 16 * 1024;

/**
 * The lines that wrap the start logic. PRIME copies everything from the begin line to the
 * end line (both included) out of the running file into the boot hook. The template spells
 * them too; the renderer refuses a template whose marker lines differ.
 */
export const START_LOGIC_MARKERS = {
  begin: '# >>> cdk-warm-runners start logic: begin >>>',
  end: '# <<< cdk-warm-runners start logic: end <<<',
} as const;

/**
 * Bounds that keep the largest rendering under `USER_DATA_LIMIT_BYTES`: the start logic takes
 * about 12 KB of the 16 KB gzipped, and every free-text input at its bound, as random text gzip
 * cannot shrink, must fit the rest (test/templates/render.test.ts, `largestOptions`).
 */
export const PREPARE_COMMANDS_MAX = 16;
export const PREPARE_COMMAND_MAX_LENGTH = 512;
export const PREPARE_COMMANDS_MAX_TOTAL = 1024;
export const HOST_PATH_MAX_LENGTH = 64;

/** Every host path the start logic touches. */
export interface HostPaths {
  /** Where the hook's unit file goes. @default '/etc/systemd/system' */
  readonly unitDir?: string;
  /** The hook: the start logic copied out of the user data. @default '/usr/local/sbin/<prefix>-start-runner' */
  readonly hookPath?: string;
  /** Small state across boots (cached identity, the "RUN began" marker). @default '/var/lib/<prefix>' */
  readonly stateDir?: string;
  /** Log file every line also goes to (besides stderr: the journal or cloud-init's log). @default '/var/log/<prefix>-start-runner.log' */
  readonly logFile?: string;
  /** Regenerated on RUN. @default '/etc/machine-id' */
  readonly machineIdFile?: string;
  /** Device PRIME reads through once; empty means the disk holding the root file system, found at boot. @default '' */
  readonly preReadDevice?: string;
  /** Holds the instance id on Nitro instances. @default '/sys/devices/virtual/dmi/id/board_asset_tag' */
  readonly dmiAssetTagFile?: string;
  /** Source of the new machine id. @default '/proc/sys/kernel/random/uuid' */
  readonly randomUuidFile?: string;
  /** The runner user's home, cleaned after a job of a reusable pool; empty means the user database's. @default '' */
  readonly runnerHome?: string;
  /** Temp directory emptied after a job of a reusable pool. @default '/tmp' */
  readonly tmpDir?: string;
  /** Temp directory emptied after a job of a reusable pool. @default '/var/tmp' */
  readonly varTmpDir?: string;
  /** Shared-memory directory emptied after a job of a reusable pool. @default '/dev/shm' */
  readonly shmDir?: string;
  /** Where the aws CLI's snap puts its command (an image without the CLI: Ubuntu), added to the PATH. @default '/snap/bin' */
  readonly snapBinDir?: string;
}

/**
 * What `RunnerUserData.render` renders the boot script with: a pool's settings, time bounds
 * and host paths. The constructs fill it from their props; custom user-data authors give at
 * least `provider` and keep the rest at their defaults.
 */
export interface UserDataOptions {
  /** CI flavour of the pool. */
  readonly provider: Provider;
  /** Fleet prefix of tag keys and SSM paths. @default 'warm-runners' */
  readonly prefix?: string;
  /** Unprivileged user the runner runs as. @default 'runner' */
  readonly runnerUser?: string;
  /** Runner directory (GitHub: holds run.sh; GitLab: holds builds/). @default '/opt/actions-runner' or '/opt/gitlab-runner' */
  readonly runnerDir?: string;
  /** GitLab runner binary. @default '/usr/bin/gitlab-runner' */
  readonly gitlabRunnerBinary?: string;
  /**
   * Shell commands PRIME runs as root, in order, each with `bash -euo pipefail -c` (pull images,
   * warm caches); a failing one fails the PRIME. Never put secrets here: user data is readable.
   * @default []
   */
  readonly prepareCommands?: string[];
  /** WAIT gives up after this many seconds. @default 300 */
  readonly waitSeconds?: number;
  /** WAIT polls SSM this often. @default 2 */
  readonly pollSeconds?: number;
  /** Pause between retries of IMDS and AWS calls. @default 1 */
  readonly retryDelaySeconds?: number;
  /** Attempts per IMDS request (IMDS may not answer in the first second of a boot). @default 10 */
  readonly imdsAttempts?: number;
  /** Attempts per AWS CLI call, each with the CLI's own retries inside. @default 5 */
  readonly awsAttempts?: number;
  /** Time limit of one IMDS request. @default 2 */
  readonly httpTimeoutSeconds?: number;
  /** `--cli-connect-timeout` of every aws CLI call (the CLI's own default is 60). @default 3 */
  readonly awsConnectTimeoutSeconds?: number;
  /** `--cli-read-timeout` of every aws CLI call (the CLI's own default is 60). @default 5 */
  readonly awsReadTimeoutSeconds?: number;
  /** AWS_MAX_ATTEMPTS (standard retry mode) of each aws CLI call, inside each of `awsAttempts`. @default 2 */
  readonly awsCliMaxAttempts?: number;
  /**
   * The runner release the boot installs when the image lacks the runner (templates/install-runner.sh):
   * version, and per architecture a URL (https; a mirror or a bucket) and its SHA-256.
   * @default - the contract's pinned release for the provider (DEFAULT_RUNNER_PACKAGES)
   */
  readonly runnerPackage?: RunnerPackage;
  /**
   * Bound of the runner package's download, all attempts together (`curl --max-time` and
   * `--retry-max-time`). With `packageInstallSeconds` it bounds the install, which must end well
   * inside the pool's priming timeout (15 minutes by default). @default 300
   */
  readonly downloadSeconds?: number;
  /**
   * Install the newest runner release the control plane resolved (the SSM parameter
   * `ssmPaths(prefix).runnerRelease(provider)`, read at install time) instead of `runnerPackage`,
   * which stays the fallback until a release is resolved. The instance tags itself with the
   * version it installed either way.
   * @default false
   */
  readonly followLatestRunner?: boolean;
  /** `curl --retry`: further attempts after a transient download error (timeout, 408, 429, 5xx). @default 3 */
  readonly downloadRetries?: number;
  /**
   * Bound of each package manager call of the install step (`dnf install`; `apt-get update`,
   * once per boot, and `apt-get install`, each), the wait for apt's dpkg lock included. @default 300
   */
  readonly packageInstallSeconds?: number;
  /** GitLab: `run-single --wait-timeout`, how long the runner waits for its job. @default 300 */
  readonly runnerWaitTimeoutSeconds?: number;
  /** Bound of each shipping of the boot log to CloudWatch Logs (at the end of every mode). @default 10 */
  readonly logShipSeconds?: number;
  /** Name of the hook's unit. @default '<prefix>-start-runner.service' */
  readonly unitName?: string;
  /**
   * Where the script keeps its state, hook, unit and log on the instance; the defaults are
   * the Amazon Linux paths (the test sandboxes relocate them).
   * @default - the defaults of each HostPaths field
   */
  readonly hostPaths?: HostPaths;
  /** IMDS base URL, also given to the aws CLI for its credentials. @default 'http://169.254.169.254' */
  readonly imdsEndpoint?: string;
  /** The aws CLI. @default 'aws' */
  readonly awsCli?: string;
  /**
   * `--endpoint-url` for every aws CLI call. For test sandboxes (moto); leave unset on EC2.
   * @default - none: the aws CLI's own endpoints
   */
  readonly awsEndpointUrl?: string;
  /**
   * The pool's reuse (contract reuse.ts): after its job the instance cleans itself and parks
   * with its cache directories instead of terminating (docs/boot-modes.md, "Reuse").
   * @default - none: every instance serves one job and terminates
   */
  readonly reuse?: PoolReuseConfig;
  /**
   * Docker on the instance (the pool's `docker` prop, docs/docker.md): installed while priming
   * and on a cold launch, and for GitLab the executor's settings.
   * @default - no Docker; GitLab runs the shell executor
   */
  readonly docker?: PoolDockerProps;
  /** How long the install step waits for the Docker daemon to answer after starting it. @default 120 */
  readonly dockerReadySeconds?: number;
  /**
   * SHA-256 (64 lower-case hex digits) of the fleet's extra CA certificates, the value of the
   * String parameter `ssmPaths(prefix).caCertificates`. Set, the boot installs them into the OS
   * trust store before anything talks to the CI server (once per instance), refusing a value
   * with another digest (docs/private-network.md).
   * @default - none: the image's trust store as it is
   */
  readonly caCertificatesSha256?: string;
}

/** The Docker settings the boot renders, defaults filled in. */
export interface ResolvedDockerOptions {
  readonly gitlabExecutor: GitLabExecutor;
  readonly image: string;
  readonly privileged: boolean;
  readonly pullPolicy: DockerPullPolicy;
  readonly volumes: string[];
}

export type ResolvedUserDataOptions = Required<Omit<UserDataOptions, 'hostPaths' | 'prepareCommands' | 'reuse' | 'docker' | 'caCertificatesSha256'>> & {
  readonly hostPaths: Required<HostPaths>;
  readonly prepareCommands: string[];
  readonly reuse?: PoolReuseConfig;
  readonly docker?: ResolvedDockerOptions;
  readonly caCertificatesSha256?: string;
};

/** The docker executor's defaults (PoolDockerProps). */
export const DOCKER_DEFAULTS = {
  gitlabExecutor: GitLabExecutor.DOCKER,
  image: 'alpine:3',
  privileged: false,
  pullPolicy: DockerPullPolicy.IF_NOT_PRESENT,
  volumesMax: 8,
  // All entries together, bytes: mounts such as /cache or the Docker socket take a few dozen each.
  volumesMaxTotal: 512,
} as const;
const IMAGE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$/;
const VOLUME_PATTERN = /^\/[A-Za-z0-9._/+-]*(?::\/[A-Za-z0-9._/+-]*(?::(?:ro|rw))?)?$/;

function resolveDocker(docker: PoolDockerProps): ResolvedDockerOptions {
  return {
    gitlabExecutor: docker.gitlabExecutor ?? DOCKER_DEFAULTS.gitlabExecutor,
    image: docker.image ?? DOCKER_DEFAULTS.image,
    privileged: docker.privileged ?? DOCKER_DEFAULTS.privileged,
    pullPolicy: docker.pullPolicy ?? DOCKER_DEFAULTS.pullPolicy,
    volumes: docker.volumes ?? [],
  };
}

function dockerProblems(d: ResolvedDockerOptions): string[] {
  const problems: string[] = [];
  if (!(Object.values(GitLabExecutor) as string[]).includes(d.gitlabExecutor)) {
    problems.push(`docker.gitlabExecutor "${String(d.gitlabExecutor)}" must be one of ${Object.values(GitLabExecutor).join(', ')}`);
  }
  if (!(Object.values(DockerPullPolicy) as string[]).includes(d.pullPolicy)) {
    problems.push(`docker.pullPolicy "${String(d.pullPolicy)}" must be one of ${Object.values(DockerPullPolicy).join(', ')}`);
  }
  if (!IMAGE_PATTERN.test(d.image)) problems.push(`docker.image "${d.image}" must be an image reference such as "alpine:3" or "registry.example.com/team/build:1.2"`);
  if (d.volumes.length > DOCKER_DEFAULTS.volumesMax) problems.push(`docker.volumes has ${d.volumes.length} entries, at most ${DOCKER_DEFAULTS.volumesMax}`);
  const total = d.volumes.reduce((sum, v) => sum + Buffer.byteLength(v), 0);
  if (total > DOCKER_DEFAULTS.volumesMaxTotal) {
    problems.push(`docker.volumes total ${total} bytes, at most ${DOCKER_DEFAULTS.volumesMaxTotal} fit in user data: mount one parent directory instead of several, or shorten the paths`);
  }
  for (const v of d.volumes) {
    if (!VOLUME_PATTERN.test(v) || v.length > 2 * HOST_PATH_MAX_LENGTH + 4) {
      problems.push(`docker.volumes entry "${v}" must be "/path" or "/host/path:/path" with an optional ":ro" or ":rw" (letters, digits, ".", "_", "+", "-", "/"; each path at most ${HOST_PATH_MAX_LENGTH})`);
    }
  }
  return problems;
}

const DEFAULTS = {
  runnerUser: 'runner',
  gitlabRunnerBinary: '/usr/bin/gitlab-runner',
  // The scale-up reads the same default (a redelivery's take-over bound, cold-tokens.ts).
  waitSeconds: FLEET_DEFAULTS.bootWaitSeconds,
  pollSeconds: 2,
  retryDelaySeconds: 1,
  imdsAttempts: 10,
  awsAttempts: 5,
  httpTimeoutSeconds: 2,
  awsConnectTimeoutSeconds: 3,
  awsReadTimeoutSeconds: 5,
  awsCliMaxAttempts: 2,
  runnerWaitTimeoutSeconds: 300,
  downloadSeconds: 300,
  downloadRetries: 3,
  packageInstallSeconds: 300,
  dockerReadySeconds: 120,
  logShipSeconds: 10,
  imdsEndpoint: 'http://169.254.169.254',
  awsCli: 'aws',
  awsEndpointUrl: '',
} as const;

const RUNNER_DIR_DEFAULT: Record<Provider, string> = {
  github: '/opt/actions-runner',
  gitlab: '/opt/gitlab-runner',
};

const PATH_PATTERN = /^\/[A-Za-z0-9._/+-]*$/;
const USER_PATTERN = /^[a-z_][a-z0-9_-]{0,31}$/;
const UNIT_NAME_PATTERN = /^[A-Za-z0-9_.:-]{1,100}\.service$/;
const URL_PATTERN = /^https?:\/\/[A-Za-z0-9.\-[\]:]+\/?$/;
const COMMAND_PATTERN = /^[A-Za-z0-9._/+-]+$/;

/** Fills in the defaults and checks every option; throws one error that lists every problem. */
export function resolveUserDataOptions(options: UserDataOptions): ResolvedUserDataOptions {
  const problems: string[] = [];
  const provider = options.provider;
  if (!(PROVIDERS as readonly string[]).includes(provider)) {
    problems.push(`provider "${String(provider)}" must be one of ${PROVIDERS.join(', ')}`);
  }
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  const prefixIssue = prefixProblem(prefix);
  if (prefixIssue) problems.push(prefixIssue);
  const safePrefix = prefixIssue ? DEFAULT_PREFIX : prefix;
  const p = options.hostPaths ?? {};
  const resolved: ResolvedUserDataOptions = {
    provider,
    prefix,
    runnerUser: options.runnerUser ?? DEFAULTS.runnerUser,
    runnerDir: options.runnerDir ?? RUNNER_DIR_DEFAULT[provider] ?? RUNNER_DIR_DEFAULT.github,
    gitlabRunnerBinary: options.gitlabRunnerBinary ?? DEFAULTS.gitlabRunnerBinary,
    prepareCommands: options.prepareCommands ?? [],
    waitSeconds: options.waitSeconds ?? DEFAULTS.waitSeconds,
    pollSeconds: options.pollSeconds ?? DEFAULTS.pollSeconds,
    retryDelaySeconds: options.retryDelaySeconds ?? DEFAULTS.retryDelaySeconds,
    imdsAttempts: options.imdsAttempts ?? DEFAULTS.imdsAttempts,
    awsAttempts: options.awsAttempts ?? DEFAULTS.awsAttempts,
    httpTimeoutSeconds: options.httpTimeoutSeconds ?? DEFAULTS.httpTimeoutSeconds,
    awsConnectTimeoutSeconds: options.awsConnectTimeoutSeconds ?? DEFAULTS.awsConnectTimeoutSeconds,
    awsReadTimeoutSeconds: options.awsReadTimeoutSeconds ?? DEFAULTS.awsReadTimeoutSeconds,
    awsCliMaxAttempts: options.awsCliMaxAttempts ?? DEFAULTS.awsCliMaxAttempts,
    runnerWaitTimeoutSeconds: options.runnerWaitTimeoutSeconds ?? DEFAULTS.runnerWaitTimeoutSeconds,
    runnerPackage: options.runnerPackage ?? DEFAULT_RUNNER_PACKAGES[provider] ?? DEFAULT_RUNNER_PACKAGES.github,
    followLatestRunner: options.followLatestRunner ?? false,
    downloadSeconds: options.downloadSeconds ?? DEFAULTS.downloadSeconds,
    downloadRetries: options.downloadRetries ?? DEFAULTS.downloadRetries,
    packageInstallSeconds: options.packageInstallSeconds ?? DEFAULTS.packageInstallSeconds,
    dockerReadySeconds: options.dockerReadySeconds ?? DEFAULTS.dockerReadySeconds,
    logShipSeconds: options.logShipSeconds ?? DEFAULTS.logShipSeconds,
    unitName: options.unitName ?? `${safePrefix}-start-runner.service`,
    hostPaths: {
      unitDir: p.unitDir ?? '/etc/systemd/system',
      hookPath: p.hookPath ?? `/usr/local/sbin/${safePrefix}-start-runner`,
      stateDir: p.stateDir ?? `/var/lib/${safePrefix}`,
      logFile: p.logFile ?? `/var/log/${safePrefix}-start-runner.log`,
      machineIdFile: p.machineIdFile ?? '/etc/machine-id',
      preReadDevice: p.preReadDevice ?? '',
      dmiAssetTagFile: p.dmiAssetTagFile ?? '/sys/devices/virtual/dmi/id/board_asset_tag',
      randomUuidFile: p.randomUuidFile ?? '/proc/sys/kernel/random/uuid',
      runnerHome: p.runnerHome ?? '',
      tmpDir: p.tmpDir ?? TEMP_DEFAULTS.tmpDir,
      varTmpDir: p.varTmpDir ?? TEMP_DEFAULTS.varTmpDir,
      shmDir: p.shmDir ?? TEMP_DEFAULTS.shmDir,
      snapBinDir: p.snapBinDir ?? '/snap/bin',
    },
    ...(options.reuse ? { reuse: options.reuse } : {}),
    ...(options.docker ? { docker: resolveDocker(options.docker) } : {}),
    ...(options.caCertificatesSha256 ? { caCertificatesSha256: options.caCertificatesSha256 } : {}),
    imdsEndpoint: options.imdsEndpoint ?? DEFAULTS.imdsEndpoint,
    awsCli: options.awsCli ?? DEFAULTS.awsCli,
    awsEndpointUrl: options.awsEndpointUrl ?? DEFAULTS.awsEndpointUrl,
  };

  if (!USER_PATTERN.test(resolved.runnerUser)) {
    problems.push(`runnerUser "${resolved.runnerUser}" must be a Linux user name (lower-case letters, digits, "_" or "-", at most 32)`);
  } else if (resolved.runnerUser === 'root') {
    // The job runs as this user: as root it could read the boot's state and change the host.
    problems.push('runnerUser "root" is refused: jobs run as the runner user, so give it an unprivileged user (the default "runner")');
  }
  const checkPath = (name: string, value: string, allowEmpty = false): void => {
    if (allowEmpty && value === '') return;
    if (!PATH_PATTERN.test(value) || value.length > HOST_PATH_MAX_LENGTH || value.includes('//') || value.endsWith('/')) {
      problems.push(
        `${name} "${value}" must be an absolute path of letters, digits, ".", "_", "+", "-" and single "/", without a trailing "/", at most ${HOST_PATH_MAX_LENGTH} characters`,
      );
    }
  };
  checkPath('runnerDir', resolved.runnerDir);
  checkPath('gitlabRunnerBinary', resolved.gitlabRunnerBinary);
  for (const [name, value] of Object.entries(resolved.hostPaths)) {
    checkPath(`hostPaths.${name}`, value, name === 'preReadDevice' || name === 'runnerHome');
  }
  if (options.caCertificatesSha256 !== undefined && !/^[0-9a-f]{64}$/.test(options.caCertificatesSha256)) {
    problems.push(`caCertificatesSha256 "${options.caCertificatesSha256}" must be a SHA-256 in 64 lower-case hex digits`);
  }
  if (resolved.reuse) problems.push(...reuseProblems(resolved));
  if (resolved.docker) problems.push(...dockerProblems(resolved.docker));
  if (!UNIT_NAME_PATTERN.test(resolved.unitName)) {
    problems.push(`unitName "${resolved.unitName}" must be a systemd service name such as "runner-boot.service"`);
  }
  const checkNumber = (name: string, value: number, min: number, max: number, integer: boolean): void => {
    const ok = Number.isFinite(value) && value >= min && value <= max && (integer ? Number.isInteger(value) : Math.round(value * 1000) === value * 1000);
    if (!ok) {
      problems.push(`${name} ${value} must be ${integer ? 'an integer' : 'a number with at most 3 decimals'} from ${min} to ${max}`);
    }
  };
  checkNumber('waitSeconds', resolved.waitSeconds, 1, 86_400, true);
  checkNumber('pollSeconds', resolved.pollSeconds, 0.01, 300, false);
  checkNumber('retryDelaySeconds', resolved.retryDelaySeconds, 0, 300, false);
  checkNumber('httpTimeoutSeconds', resolved.httpTimeoutSeconds, 0.1, 60, false);
  checkNumber('awsConnectTimeoutSeconds', resolved.awsConnectTimeoutSeconds, 1, 60, true);
  checkNumber('awsReadTimeoutSeconds', resolved.awsReadTimeoutSeconds, 1, 60, true);
  checkNumber('awsCliMaxAttempts', resolved.awsCliMaxAttempts, 1, 10, true);
  checkNumber('imdsAttempts', resolved.imdsAttempts, 1, 60, true);
  checkNumber('awsAttempts', resolved.awsAttempts, 1, 20, true);
  checkNumber('runnerWaitTimeoutSeconds', resolved.runnerWaitTimeoutSeconds, 1, 86_400, true);
  checkNumber('logShipSeconds', resolved.logShipSeconds, 1, 60, true);
  checkNumber('downloadSeconds', resolved.downloadSeconds, 1, 3600, true);
  checkNumber('downloadRetries', resolved.downloadRetries, 0, 10, true);
  checkNumber('packageInstallSeconds', resolved.packageInstallSeconds, 1, 3600, true);
  checkNumber('dockerReadySeconds', resolved.dockerReadySeconds, 1, 3600, true);
  problems.push(...runnerPackageProblems(resolved.runnerPackage));
  if (!URL_PATTERN.test(resolved.imdsEndpoint) || resolved.imdsEndpoint.endsWith('/') || resolved.imdsEndpoint.length > 100) {
    problems.push(`imdsEndpoint "${resolved.imdsEndpoint}" must be an http(s) base URL without a path or trailing "/", such as "http://169.254.169.254"`);
  }
  if (resolved.awsEndpointUrl !== '' && (!URL_PATTERN.test(resolved.awsEndpointUrl) || resolved.awsEndpointUrl.length > 100)) {
    problems.push(`awsEndpointUrl "${resolved.awsEndpointUrl}" must be an http(s) base URL such as "http://127.0.0.1:5000", or left out`);
  }
  if (!COMMAND_PATTERN.test(resolved.awsCli) || resolved.awsCli.length > HOST_PATH_MAX_LENGTH) {
    problems.push(`awsCli "${resolved.awsCli}" must be a command name or path without spaces or quotes`);
  }
  problems.push(...prepareCommandProblems(resolved.prepareCommands));

  if (problems.length > 0) {
    throw new Error(`cannot render the boot script:\n- ${problems.join('\n- ')}`);
  }
  return resolved;
}

const TEMP_DEFAULTS = { tmpDir: '/tmp', varTmpDir: '/var/tmp', shmDir: '/dev/shm' } as const;

/**
 * The limits of the contract, and cache directories that cleaning cannot remove or would:
 * inside a temp directory, the state, or the runner's own directory itself. The contract's
 * rules for real hosts (no system or temp directory) hold when the temp directories are the
 * real ones; a relocated sandbox is checked against its own mapping.
 */
function reuseProblems(o: ResolvedUserDataOptions): string[] {
  const problems: string[] = [];
  const r = o.reuse!;
  const int = (v: number, min: number, max: number): boolean => Number.isInteger(v) && v >= min && v <= max;
  if (!int(r.maxJobs, 1, REUSE_LIMITS.maxJobs)) problems.push(`reuse.maxJobs ${r.maxJobs} must be an integer from 1 to ${REUSE_LIMITS.maxJobs}`);
  if (!int(r.maxAgeSeconds, REUSE_LIMITS.minAgeSeconds, REUSE_LIMITS.maxAgeSeconds)) {
    problems.push(`reuse.maxAgeSeconds ${r.maxAgeSeconds} must be an integer from ${REUSE_LIMITS.minAgeSeconds} to ${REUSE_LIMITS.maxAgeSeconds}`);
  }
  if (r.cacheDirectories.length > REUSE_LIMITS.cacheDirectories) problems.push(`reuse.cacheDirectories lists more than ${REUSE_LIMITS.cacheDirectories}`);
  const total = r.cacheDirectories.reduce((sum, dir) => sum + Buffer.byteLength(dir), 0);
  if (total > REUSE_LIMITS.cacheDirectoriesTotal) problems.push(cacheDirectoriesTotalProblem(total));
  const h = o.hostPaths;
  const temps = [h.tmpDir, h.varTmpDir, h.shmDir];
  const real = temps.every((t, i) => t === Object.values(TEMP_DEFAULTS)[i]);
  const inside = (dir: string, outer: string): boolean => dir === outer || dir.startsWith(`${outer}/`);
  for (const dir of r.cacheDirectories) {
    // The contract's bound (cacheDirectoryProblem), not the host paths' shorter one.
    if (!PATH_PATTERN.test(dir) || dir.length > 200 || dir.includes('//') || dir.endsWith('/')) {
      problems.push(`cache directory "${dir}" must be an absolute path of letters, digits, ".", "_", "+", "-" and single "/", without a trailing "/", at most 200 characters`);
    }
    const problem = real ? cacheDirectoryProblem(dir) : undefined;
    if (problem) problems.push(problem);
    const clash = [...temps, h.stateDir].find((t) => inside(dir, t)) ?? (inside(o.runnerDir, dir) ? o.runnerDir : undefined);
    if (clash) problems.push(`cache directory "${dir}" overlaps ${clash}, which cleaning empties or needs: use a directory of its own`);
    if (dir.split('/').some((s) => s === '.' || s === '..')) problems.push(`cache directory "${dir}" must not contain "." or ".." segments`);
  }
  return problems;
}

function prepareCommandProblems(commands: readonly string[]): string[] {
  const problems: string[] = [];
  if (commands.length > PREPARE_COMMANDS_MAX) {
    problems.push(`prepareCommands has ${commands.length} commands, at most ${PREPARE_COMMANDS_MAX} fit in user data: bake the rest into the AMI or into one script`);
  }
  let total = 0;
  commands.forEach((command, i) => {
    const name = `prepareCommands[${i}]`;
    total += Buffer.byteLength(command);
    if (typeof command !== 'string' || command.trim() === '') {
      problems.push(`${name} is empty`);
      return;
    }
    if (command.length > PREPARE_COMMAND_MAX_LENGTH) {
      problems.push(`${name} is ${command.length} characters, at most ${PREPARE_COMMAND_MAX_LENGTH}: move it into a script in the AMI`);
    }
    if (command.includes('\0')) problems.push(`${name} contains a NUL character`);
    if (command.includes(START_LOGIC_MARKERS.begin) || command.includes(START_LOGIC_MARKERS.end)) {
      problems.push(`${name} contains a start-logic marker line, which would cut the hook short`);
    }
    // Name the kind of secret, never the value: this message may end up in a build log.
    for (const kind of findSecretLikeValues(command)) {
      problems.push(`${name} looks like it contains a secret (${kind}); user data is readable by anyone who can describe the instance: fetch the secret at boot instead`);
    }
  });
  if (total > PREPARE_COMMANDS_MAX_TOTAL) {
    problems.push(`prepareCommands total ${total} bytes, at most ${PREPARE_COMMANDS_MAX_TOTAL} fit in user data: move them into a script in the AMI`);
  }
  return problems;
}

const SECRET_PATTERNS: readonly (readonly [string, RegExp])[] = [
  ['GitHub token', /\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})/],
  ['GitLab token', /\b(?:glpat|glrt|gldt|glptt|glcbt|glimt|glagent)-[A-Za-z0-9_-]{16,}/],
  ['AWS access key id', /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/],
  ['AWS secret access key', /aws_secret_access_key\s*[=:]/i],
  ['private key', /-----BEGIN [A-Z ]*PRIVATE KEY-----/],
  ['GitHub JIT runner config', /\bjitconfig[= ]+[A-Za-z0-9+/=]{40,}/i],
  ['Slack token', /\bxox[abprs]-[A-Za-z0-9-]{10,}/],
];

/** The kinds of secret-looking values in `text` (empty when none): tokens, keys, JIT configs. */
export function findSecretLikeValues(text: string): string[] {
  return SECRET_PATTERNS.filter(([, pattern]) => pattern.test(text)).map(([kind]) => kind);
}

/** A shell word that bash reads back as exactly `value`. */
export function shellQuote(value: string): string {
  if (/^[A-Za-z0-9_./:=@%+,-]+$/.test(value)) return value;
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

let templatesDirCache: string | undefined;
/** templates/ beside lib/ (run from source) or beside dist/lib/ (run from the build). */
function templatesDir(): string {
  if (templatesDirCache) return templatesDirCache;
  for (const candidate of [join(__dirname, '..', 'templates'), join(__dirname, '..', '..', 'templates')]) {
    if (existsSync(join(candidate, 'start-runner.sh'))) return (templatesDirCache = candidate);
  }
  throw new Error(`templates/start-runner.sh not found beside ${__dirname}: the package is incomplete`);
}

function readTemplate(name: string): string {
  return readFileSync(join(templatesDir(), name), 'utf8');
}

/**
 * Drops full-line comments and blank lines, keeping the shebang, "##" notes, shellcheck
 * directives (without their reasons) and the marker lines, and with `dedent` the indentation
 * (about 1 KB of the start logic) and line continuations. Runs on the template before substitution, so rendered values (the unit
 * text, prepare commands) are never touched; the template has no multi-line strings.
 */
function stripShellComments(text: string, dedent = false): string {
  const markers: readonly string[] = [START_LOGIC_MARKERS.begin, START_LOGIC_MARKERS.end];
  const kept = text
    .split('\n')
    .map((line) => (dedent && !markers.includes(line) ? line.trimStart() : line))
    // A directive's reason is for the template's reader: `# shellcheck disable=SC1 # why`.
    .map((line) => line.replace(/^(\s*# shellcheck\s[^#]*?)\s+#.*$/, '$1'))
    .filter((line) => {
      if (markers.includes(line)) return true;
      const trimmed = line.trim();
      if (trimmed === '') return false;
      if (!trimmed.startsWith('#')) return true;
      return trimmed.startsWith('#!') || trimmed.startsWith('##') || /^# shellcheck\s/.test(trimmed);
    })
    .join('\n');
  // Continued lines become one line (dedented, the continuation's indentation is gone).
  return dedent ? kept.replace(/ \\\n/g, ' ') : kept;
}

/** Replaces every @@NAME@@; throws when the template and the values disagree. */
function substitute(template: string, values: Record<string, string>, what: string): string {
  const used = new Set<string>();
  const out = template.replace(/@@([A-Z][A-Z0-9_]*)@@/g, (_match, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`${what} has placeholder @@${name}@@ that the renderer does not know`);
    used.add(name);
    return value;
  });
  const unused = Object.keys(values).filter((name) => !used.has(name));
  if (unused.length > 0) throw new Error(`${what} lacks placeholders ${unused.join(', ')}`);
  return out;
}

function countLines(text: string, line: string): number {
  return text.split('\n').filter((l) => l === line).length;
}

/** The hook's systemd unit, as PRIME writes it into `hostPaths.unitDir`. */
export function renderHookUnit(options: UserDataOptions): string {
  const o = resolveUserDataOptions(options);
  const template = readTemplate('start-runner.service')
    .split('\n')
    .filter((line) => !/^\s*[#;]/.test(line))
    .join('\n');
  return substitute(template, { HOOK_PATH: o.hostPaths.hookPath }, 'templates/start-runner.service');
}

/**
 * The line of templates/install-runner.sh after which only the standalone rendering goes on
 * (its own log, fail and call); the start logic embeds the lines before it.
 */
export const INSTALL_STANDALONE_MARKER = '# >>> install-runner: standalone only >>>';

/** The install step's template: its body (no shebang) before the standalone marker, and the rest. */
function installTemplate(): { body: string; standalone: string } {
  const what = 'templates/install-runner.sh';
  const lines = readTemplate('install-runner.sh').split('\n');
  const at = lines.indexOf(INSTALL_STANDALONE_MARKER);
  if (lines[0] !== '#!/bin/bash' || at < 0 || countLines(lines.join('\n'), INSTALL_STANDALONE_MARKER) !== 1) {
    throw new Error(`${what} must start with #!/bin/bash and hold the line "${INSTALL_STANDALONE_MARKER}" once`);
  }
  return { body: lines.slice(1, at).join('\n'), standalone: lines.slice(at + 1).join('\n') };
}

/** The runner's OS packages for one package manager, as shell words (an "a|b" word quoted whole). */
function osPackages(provider: Provider, manager: PackageManager): string {
  return (RUNNER_OS_PACKAGES[provider]?.[manager] ?? []).map(shellQuote).join(' ');
}

/** `standalone`: the image pipeline's script, which reads no resolved release (it bakes the pin) and has no instance id to tag. */
function installValues(o: ResolvedUserDataOptions, standalone = false): Record<string, string> {
  const q = shellQuote;
  const pkg = o.runnerPackage;
  const release = !standalone && o.followLatestRunner && !prefixProblem(o.prefix) ? ssmPaths(o.prefix).runnerRelease(o.provider) : '';
  return {
    RELEASE_PARAMETER: q(release),
    TAG_RUNNER_VERSION: q(prefixProblem(o.prefix) ? '' : tagKeys(o.prefix).runnerVersion),
    PROVIDER_GITHUB: q(Provider.GITHUB),
    PROVIDER: q(o.provider),
    RUNNER_USER: q(o.runnerUser),
    RUNNER_DIR: q(o.runnerDir),
    GITLAB_RUNNER_BIN: q(o.gitlabRunnerBinary),
    PACKAGE_VERSION: q(pkg.version),
    PACKAGE_URL_X64: q(pkg.x64.url),
    PACKAGE_SHA256_X64: q(pkg.x64.sha256),
    PACKAGE_URL_ARM64: q(pkg.arm64.url),
    PACKAGE_SHA256_ARM64: q(pkg.arm64.sha256),
    DOWNLOAD_SECONDS: q(String(o.downloadSeconds)),
    DOWNLOAD_RETRIES: q(String(o.downloadRetries)),
    PACKAGE_INSTALL_SECONDS: q(String(o.packageInstallSeconds)),
    DOCKER: o.docker ? '1' : '0',
    DOCKER_READY_SECONDS: q(String(o.dockerReadySeconds)),
    SNAP_BIN: q(o.hostPaths.snapBinDir),
    OS_PACKAGES_DNF: osPackages(o.provider, PackageManager.DNF),
    OS_PACKAGES_APT: osPackages(o.provider, PackageManager.APT),
  };
}

/**
 * The install step as a standalone script (templates/install-runner.sh, whole): installs the
 * runner user and the pinned runner release when missing, and refuses a download whose SHA-256
 * differs. The start logic embeds the same step (an image pipeline and the boot share it).
 */
export function renderInstallScript(options: UserDataOptions): string {
  const o = resolveUserDataOptions(options);
  const { body, standalone } = installTemplate();
  const text = stripShellComments(`#!/bin/bash\n${body}\n${standalone}`, true);
  return `${substitute(text, installValues(o, true), 'templates/install-runner.sh')}\n`;
}

/** The start logic: the rendered lines from the begin marker to the end marker, both included. */
export function renderStartLogic(options: UserDataOptions): string {
  const o = resolveUserDataOptions(options);
  const template = readTemplate('start-runner.sh');
  const lines = template.split('\n');
  const begin = lines.indexOf(START_LOGIC_MARKERS.begin);
  const end = lines.indexOf(START_LOGIC_MARKERS.end);
  if (countLines(template, START_LOGIC_MARKERS.begin) !== 1 || countLines(template, START_LOGIC_MARKERS.end) !== 1 || begin > end) {
    throw new Error('templates/start-runner.sh must hold the begin and the end marker line once each, in that order');
  }
  const block = stripShellComments(lines.slice(begin, end + 1).join('\n'), true);
  const tags = tagKeys(o.prefix);
  const q = shellQuote;
  const mode = (m: BootMode): string => q(m);
  const values: Record<string, string> = {
    MODE_RUN: mode('RUN'),
    MODE_PRIME: mode('PRIME'),
    MODE_WAIT: mode('WAIT'),
    PROVIDER_GITHUB: q(Provider.GITHUB),
    TAG_WARM_STANDBY: q(tags.warmStandby),
    WARM_STANDBY_VALUE: q(WARM_STANDBY_VALUE),
    TAG_ACTIVATED_AT: q(tags.activatedAt),
    TAG_TRACE_ID: q(tags.traceId),
    TAG_JOB_STARTED: q(tags.jobStarted),
    TAG_START_FAILURE: q(tags.startFailure),
    TAG_AFFINITY: q(tags.affinity),
    TAG_USES: q(tags.uses),
    TAG_PARKING: q(tags.parking),
    TAG_JOB_ID: q(tags.jobId),
    TAG_RUNNER_ID: q(tags.runnerId),
    TAG_IDLE_SINCE: q(tags.idleSince),
    KEY_AFFINITY: q(RUNNER_CONFIG_KEYS.affinity),
    KEY_USES: q(RUNNER_CONFIG_KEYS.uses),
    AFFINITY_RE: q(AFFINITY_PATTERN),
    REUSE: o.reuse ? '1' : '0',
    REUSE_MAX_JOBS: q(String(o.reuse?.maxJobs ?? 0)),
    REUSE_MAX_AGE_SECONDS: q(String(o.reuse?.maxAgeSeconds ?? 0)),
    CACHE_DIRECTORIES: (o.reuse?.cacheDirectories ?? []).map(q).join(' '),
    TEMP_DIRECTORIES: [o.hostPaths.tmpDir, o.hostPaths.varTmpDir, o.hostPaths.shmDir].map(q).join(' '),
    RUNNER_HOME: q(o.hostPaths.runnerHome),
    CA_PARAMETER: q(o.caCertificatesSha256 ? ssmPaths(o.prefix).caCertificates : ''),
    CA_SHA256: q(o.caCertificatesSha256 ?? ''),
    JOB_START_LINE: q(JOB_START_LINES[o.provider]),
    RUNNER_CONFIG_ROOT: q(ssmPaths(o.prefix).runnerConfigRoot),
    RUNNER_CONFIG_VERSION: q(String(RUNNER_CONFIG_VERSION)),
    KEY_VERSION: q(RUNNER_CONFIG_KEYS.version),
    KEY_PROVIDER: q(RUNNER_CONFIG_KEYS.provider),
    KEY_INSTANCE: q(RUNNER_CONFIG_KEYS.instance),
    KEY_JITCONFIG: q(RUNNER_CONFIG_KEYS.jitConfig),
    KEY_URL: q(RUNNER_CONFIG_KEYS.url),
    KEY_TOKEN: q(RUNNER_CONFIG_KEYS.token),
    LOG_KEY_MODE: q(BOOT_LOG_KEYS.mode),
    LOG_KEY_TRACE: q(BOOT_LOG_KEYS.traceId),
    LOG_KEY_LATENCY: q(BOOT_LOG_KEYS.activationLatency),
    TAG_POOL: q(tags.pool),
    LEDGER_KEY_POOL: q(LEDGER_LOG_KEYS.pool),
    LEDGER_KEY_STAGE: q(LEDGER_LOG_KEYS.stage),
    LEDGER_KEY_SECONDS: q(LEDGER_LOG_KEYS.seconds),
    STAGE_BOOT_BEGAN: q('boot-began' satisfies LedgerStage),
    STAGE_RUNNER_STARTED: q('runner-started' satisfies LedgerStage),
    STAGE_JOB_TAKEN: q('job-taken' satisfies LedgerStage),
    INSTANCE_ID_RE: q(INSTANCE_ID_PATTERN.source),
    LOG_GROUP: q(bootLogGroupName(o.prefix)),
    PROVIDER: q(o.provider),
    RUNNER_USER: q(o.runnerUser),
    RUNNER_DIR: q(o.runnerDir),
    GITLAB_RUNNER_BIN: q(o.gitlabRunnerBinary),
    RUNNER_WAIT_TIMEOUT: q(String(o.runnerWaitTimeoutSeconds)),
    // Without Docker a GitLab pool runs the shell executor.
    GITLAB_EXECUTOR: q(o.docker?.gitlabExecutor ?? GitLabExecutor.SHELL),
    DOCKER_IMAGE: q(o.docker?.image ?? DOCKER_DEFAULTS.image),
    DOCKER_PRIVILEGED: o.docker?.privileged ? '1' : '0',
    DOCKER_PULL_POLICY: q(o.docker?.pullPolicy ?? DOCKER_DEFAULTS.pullPolicy),
    DOCKER_VOLUMES: (o.docker?.volumes ?? []).map(q).join(' '),
    WAIT_SECONDS: q(String(o.waitSeconds)),
    POLL_SECONDS: q(String(o.pollSeconds)),
    RETRY_DELAY_SECONDS: q(String(o.retryDelaySeconds)),
    IMDS_ATTEMPTS: q(String(o.imdsAttempts)),
    AWS_ATTEMPTS: q(String(o.awsAttempts)),
    HTTP_TIMEOUT_SECONDS: q(String(o.httpTimeoutSeconds)),
    AWS_CONNECT_TIMEOUT: q(String(o.awsConnectTimeoutSeconds)),
    AWS_READ_TIMEOUT: q(String(o.awsReadTimeoutSeconds)),
    AWS_CLI_MAX_ATTEMPTS: q(String(o.awsCliMaxAttempts)),
    LOG_SHIP_SECONDS: q(String(o.logShipSeconds)),
    UNIT_DIR: q(o.hostPaths.unitDir),
    UNIT_NAME: q(o.unitName),
    HOOK_PATH: q(o.hostPaths.hookPath),
    STATE_DIR: q(o.hostPaths.stateDir),
    LOG_FILE: q(o.hostPaths.logFile),
    MACHINE_ID_FILE: q(o.hostPaths.machineIdFile),
    PRE_READ_DEVICE: q(o.hostPaths.preReadDevice),
    DMI_ASSET_TAG_FILE: q(o.hostPaths.dmiAssetTagFile),
    RANDOM_UUID_FILE: q(o.hostPaths.randomUuidFile),
    IMDS_ENDPOINT: q(o.imdsEndpoint),
    AWS_CLI: q(o.awsCli),
    AWS_ENDPOINT_URL: q(o.awsEndpointUrl),
    BEGIN_MARKER: q(START_LOGIC_MARKERS.begin),
    END_MARKER: q(START_LOGIC_MARKERS.end),
    UNIT_TEXT: q(renderHookUnit(o)),
    PREPARE_COMMANDS: o.prepareCommands.map(q).join(' '),
    INSTALL_RUNNER: substitute(stripShellComments(installTemplate().body, true), installValues(o), 'templates/install-runner.sh'),
  };
  return substitute(block, values, 'templates/start-runner.sh');
}

/** The hook file exactly as PRIME writes it: a shebang, then the start logic. */
export function renderHookScript(options: UserDataOptions): string {
  return `#!/bin/bash\n${renderStartLogic(options)}\n`;
}

/**
 * The user data of an instance of the pool as text: the start logic, run by cloud-init on the
 * first boot. The launch template carries it gzip-compressed (`encodeUserData`). Throws when
 * the compressed form would not fit EC2's limit or the text looks like it holds a secret.
 */
export function renderUserData(options: UserDataOptions): string {
  const startLogic = renderStartLogic(options);
  const template = stripShellComments(readTemplate('user-data.sh'));
  const userData = `${substitute(template, { START_RUNNER: startLogic }, 'templates/user-data.sh')}\n`;
  for (const marker of [START_LOGIC_MARKERS.begin, START_LOGIC_MARKERS.end]) {
    const count = countLines(userData, marker);
    if (count !== 1) throw new Error(`rendered user data holds the marker line "${marker}" ${count} times, not once`);
  }
  checkUserDataSize(userData, userDataContributors(resolveUserDataOptions(options)));
  const secrets = findSecretLikeValues(userData);
  if (secrets.length > 0) {
    throw new Error(`rendered user data looks like it contains a secret (${secrets.join(', ')}): user data is readable, fetch secrets at boot`);
  }
  return userData;
}

/** The first bytes of every gzip stream (RFC 1952, ID1 ID2). */
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

/**
 * The user data's bytes as EC2 stores them: gzip at level 9. zlib writes MTIME 0 and no file
 * name, and the OS byte is set to 3 (Unix) whatever the synthesizing host, so the same text
 * gives the same bytes (and no new launch template version) for a given zlib build; a Node.js
 * release that bundles another zlib may compress differently (docs/boot-modes.md).
 */
export function compressUserData(userData: string): Buffer {
  const gz = gzipSync(Buffer.from(userData, 'utf8'), { level: 9 });
  gz[9] = 3;
  return gz;
}

/** The free-text inputs a user can grow, by prop name, in bytes of rendered text. */
function userDataContributors(o: ResolvedUserDataOptions): Record<string, number> {
  const bytes = (values: readonly string[]): number => values.reduce((sum, v) => sum + Buffer.byteLength(v), 0);
  return {
    prepareCommands: bytes(o.prepareCommands),
    'reuse.cacheDirectories': bytes(o.reuse?.cacheDirectories ?? []),
    'docker.volumes': bytes(o.docker?.volumes ?? []),
    'docker.image': bytes(o.docker ? [o.docker.image] : []),
    'runnerPackage URLs': bytes([o.runnerPackage.x64.url, o.runnerPackage.arm64.url]),
    hostPaths: bytes(Object.values(o.hostPaths)),
  };
}

/**
 * Throws, with both sizes, the largest inputs (`contributors`, bytes by prop name) and what to
 * do, when the compressed user data would not fit EC2's limit; returns the compressed size otherwise.
 */
export function checkUserDataSize(userData: string, contributors: Record<string, number> = {}): number {
  const bytes = compressUserData(userData).length;
  if (bytes > USER_DATA_LIMIT_BYTES) {
    const largest = Object.entries(contributors)
      .filter(([, n]) => n > 0)
      .sort(([, a], [, b]) => b - a)
      .slice(0, 3)
      .map(([name, n]) => `${name} ${n} bytes`);
    throw new Error(
      `rendered user data is ${bytes} bytes gzip-compressed (${Buffer.byteLength(userData, 'utf8')} bytes of script), over EC2's limit of ${USER_DATA_LIMIT_BYTES} (before base64)` +
        `${largest.length > 0 ? `; largest inputs: ${largest.join(', ')}` : ''}: shorten or drop prepare commands, cache directories or Docker volumes, or bake them into the AMI`,
    );
  }
  return bytes;
}

/** `LaunchTemplateData.UserData`: base64 of the gzip-compressed script. */
export function encodeUserData(userData: string): string {
  return compressUserData(userData).toString('base64');
}

/** The script text of a launch template's `UserData` (base64), gunzipped when it is gzip. */
export function decodeUserData(base64: string): string {
  const bytes = Buffer.from(base64, 'base64');
  return (bytes.subarray(0, 2).equals(GZIP_MAGIC) ? gunzipSync(bytes) : bytes).toString('utf8');
}
