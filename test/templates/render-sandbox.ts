/**
 * Renders the boot script into a sandbox directory for the bats harness and the boot
 * benchmark: the same renderer as production (lib/user-data.ts), with every host path under
 * the sandbox and the loopback IMDS and AWS endpoints.
 *
 *   node --import tsx test/templates/render-sandbox.ts --root DIR --imds URL --aws URL \
 *     --aws-cli PATH --runner-user USER [--release URL --release-dir DIR]
 *
 * Writes DIR/user-data-<provider>.sh, DIR/hook-<provider>.sh (what PRIME must install) and
 * DIR/unit.service (what PRIME must write) and DIR/install-runner-<provider>.sh (the install step
 * alone, renderInstallScript) for both providers, with the runner packages of the loopback
 * release server (--release URL, --release-dir: the files it serves, for their digests), DIR/user-data-github-short-wait.sh
 * and DIR/user-data-github-short-ship.sh (a short WAIT or log shipping bound and a CLI read
 * timeout longer than it), and DIR/contract.env: the contract's values and the rendered
 * bounds the tests need, as shell assignments.
 *
 * Time bounds and the machine: a test that is not about a bound must never race one, so the
 * main renderings give WAIT and log shipping bounds that only a hang reaches. The tests of
 * a bound itself boot the rendering where that bound (and only that one) is short, scaled by
 * the machine's measured slowdown (test/support/slowdown.ts), as are the CLI and IMDS timeouts:
 * what must fit inside a bound is a few aws CLI calls, and those slow down with the machine.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { slowdown } from '../support/slowdown';
import { sandboxRunnerPackage } from './sandbox-release';
import {
  BOOT_LOG_KEYS,
  INSTANCE_LEDGER_STAGES,
  LEDGER_LOG_KEYS,
  JOB_START_LINES,
  PROVIDERS,
  Provider,
  RUNNER_CONFIG_KEYS,
  ReuseScope,
  REUSE_SCOPE_OF,
  WARM_STANDBY_VALUE,
  bootLogGroupName,
  ssmPaths,
  tagKeys,
  type RunnerPackage,
} from '../../lambdas/shared/contract';
import {
  START_LOGIC_MARKERS,
  renderHookScript,
  renderHookUnit,
  renderInstallScript,
  renderUserData,
  shellQuote,
  type UserDataOptions,
} from '../../lib/user-data';
import { caBundle } from '../../lib/function-network';

const { values } = parseArgs({
  options: {
    root: { type: 'string' },
    imds: { type: 'string' },
    aws: { type: 'string' },
    'aws-cli': { type: 'string' },
    'runner-user': { type: 'string' },
    release: { type: 'string' },
    'release-dir': { type: 'string' },
    'reuse-user': { type: 'string' },
  },
  strict: true,
});
const { root, imds, aws } = values;
const awsCli = values['aws-cli'];
const runnerUser = values['runner-user'];
if (!root || !imds || !aws || !awsCli || !runnerUser) {
  console.error('usage: render-sandbox.ts --root DIR --imds URL --aws URL --aws-cli PATH --runner-user USER');
  process.exit(2);
}

const release = values.release;
const releaseDir = values['release-dir'];
const runnerPackage = (provider: Provider): RunnerPackage => sandboxRunnerPackage(provider, release, releaseDir);

// Whole seconds (the renderer takes whole CLI timeouts), tuned on an unloaded machine, times
// the slowdown, within the renderer's limits.
const factor = slowdown();
const seconds = (base: number, max: number): number => Math.min(max, Math.ceil(base * factor));
const BOUNDS = {
  /** Hang catchers of the main renderings: a config that appears, a shipping that finishes, never reach them. */
  waitSeconds: 300,
  logShipSeconds: 60,
  /** The short bounds: room for a few polls, or for two CLI calls. */
  shortWaitSeconds: seconds(6, 45),
  shortShipSeconds: seconds(5, 45),
  /** Above what moto and the loopback IMDS take to answer. */
  awsTimeoutSeconds: seconds(2, 30),
  httpTimeoutSeconds: seconds(3, 30),
  /** The short-bound renderings': longer than the short bound, so only the bound can end a hung call. */
  slowReadTimeoutSeconds: 60,
};

// A test CA for ca.bats (the boot installs it; no TLS is made with it), as the fleet stores it: PEM, no trailing newline.
// Two certificates (ca-1.pem, ca-2.pem), and the parameter's value as the library stores them (ca.pem).
const CA_PEMS = [1, 2].map((n) => {
  const pem = execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', '/dev/null', '-days', '2', '-subj', `/CN=cwr-sandbox-ca-${n}`], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
  writeFileSync(join(root, `ca-${n}.pem`), pem);
  return pem;
});
const CA_PEM = caBundle(CA_PEMS);
writeFileSync(join(root, 'ca.pem'), CA_PEM);

const prefix = 'sandbox';
const tags = tagKeys(prefix);
/**
 * The reuse renderings' mapping: the runner user's home, the temp directories and two cache
 * directories (one in the home, one outside it) under the sandbox root, so cleaning never
 * reaches this machine's own. Their runner user is a user of its own (--reuse-user): cleaning
 * kills every process of that user.
 */
const reuseUser = values['reuse-user'] ?? runnerUser;
const reusePaths = {
  runnerHome: join(root, 'home/runner'),
  tmpDir: join(root, 'tmp'),
  varTmpDir: join(root, 'var/tmp'),
  shmDir: join(root, 'dev/shm'),
};
const reuseCache = join(root, 'var/cache/tool');
const reuseHomeCache = join(root, 'home/runner/.cache/deps');
const reuseCaches = [reuseCache, reuseHomeCache];
const REUSE_MAX_JOBS = 3;
// The contract's values for the bats files, so they spell no tag key or log key either.
const contract: Record<string, string> = {
  PREFIX: prefix,
  TAG_POOL: tags.pool,
  TAG_WARM: tags.warmStandby,
  WARM_VALUE: WARM_STANDBY_VALUE,
  TAG_ACTIVATED: tags.activatedAt,
  TAG_TRACE: tags.traceId,
  TAG_JOB: tags.jobId,
  TAG_JOB_STARTED: tags.jobStarted,
  TAG_START_FAILURE: tags.startFailure,
  TAG_AFFINITY: tags.affinity,
  TAG_USES: tags.uses,
  TAG_PARKING: tags.parking,
  TAG_RUNNER_VERSION: tags.runnerVersion,
  CA_PARAM: ssmPaths(prefix).caCertificates,
  RELEASE_PARAM_GITHUB: ssmPaths(prefix).runnerRelease(Provider.GITHUB),
  TAG_RUNNER_ID: tags.runnerId,
  TAG_IDLE_SINCE: tags.idleSince,
  KEY_AFFINITY: RUNNER_CONFIG_KEYS.affinity,
  KEY_USES: RUNNER_CONFIG_KEYS.uses,
  REUSE_USER: reuseUser,
  REUSE_HOME: reusePaths.runnerHome,
  REUSE_CACHE: reuseCache,
  REUSE_HOME_CACHE: reuseHomeCache,
  REUSE_MAX_JOBS: String(REUSE_MAX_JOBS),
  JOB_LINE_GITHUB: JOB_START_LINES[Provider.GITHUB],
  JOB_LINE_GITLAB: JOB_START_LINES[Provider.GITLAB],
  CONFIG_ROOT: ssmPaths(prefix).runnerConfigRoot,
  LOG_MODE: BOOT_LOG_KEYS.mode,
  LOG_TRACE: BOOT_LOG_KEYS.traceId,
  LOG_LATENCY: BOOT_LOG_KEYS.activationLatency,
  LEDGER_POOL: LEDGER_LOG_KEYS.pool,
  LEDGER_STAGE: LEDGER_LOG_KEYS.stage,
  LEDGER_SECONDS: LEDGER_LOG_KEYS.seconds,
  INSTANCE_STAGES: INSTANCE_LEDGER_STAGES.join(' '),
  LOG_GROUP: bootLogGroupName(prefix),
  SLOWDOWN: String(factor),
  SHORT_WAIT_SECONDS: String(BOUNDS.shortWaitSeconds),
  SHORT_SHIP_SECONDS: String(BOUNDS.shortShipSeconds),
  READ_TIMEOUT: String(BOUNDS.awsTimeoutSeconds),
  UNIT_NAME: `${prefix}-start-runner.service`,
  BEGIN_MARKER: START_LOGIC_MARKERS.begin,
  END_MARKER: START_LOGIC_MARKERS.end,
};
writeFileSync(
  join(root, 'contract.env'),
  Object.entries(contract).map(([k, v]) => `${k}=${shellQuote(v)}`).join('\n') + '\n',
);

for (const provider of PROVIDERS) {
  const options: UserDataOptions = {
    provider,
    prefix,
    runnerUser,
    runnerDir: join(root, 'runner', provider),
    gitlabRunnerBinary: join(root, 'runner', 'gitlab', 'gitlab-runner'),
    // Observable from outside; the second fails on demand so a test can fail a PRIME.
    prepareCommands: [`echo "prepared as $(id -un)" >> ${root}/calls/prepare`, `test ! -e ${root}/fail-prepare`],
    waitSeconds: BOUNDS.waitSeconds,
    pollSeconds: 0.3,
    retryDelaySeconds: 0.1,
    imdsAttempts: 3,
    awsAttempts: 3,
    httpTimeoutSeconds: BOUNDS.httpTimeoutSeconds,
    awsConnectTimeoutSeconds: BOUNDS.awsTimeoutSeconds,
    awsReadTimeoutSeconds: BOUNDS.awsTimeoutSeconds,
    awsCliMaxAttempts: 2,
    runnerWaitTimeoutSeconds: 42,
    runnerPackage: runnerPackage(provider),
    // Loopback answers come at once; a hang is what this bound would catch.
    downloadSeconds: seconds(20, 120),
    downloadRetries: 1,
    packageInstallSeconds: seconds(20, 120),
    logShipSeconds: BOUNDS.logShipSeconds,
    hostPaths: {
      unitDir: join(root, 'etc/systemd/system'),
      hookPath: join(root, 'usr/local/sbin/start-runner'),
      stateDir: join(root, 'var/lib/warm-runners'),
      logFile: join(root, 'var/log/start-runner.log'),
      machineIdFile: join(root, 'etc/machine-id'),
      preReadDevice: join(root, 'dev/root-volume'),
      dmiAssetTagFile: join(root, 'sys/board_asset_tag'),
    },
    imdsEndpoint: imds,
    awsCli,
    awsEndpointUrl: aws,
  };
  const userData = join(root, `user-data-${provider}.sh`);
  writeFileSync(userData, renderUserData(options));
  chmodSync(userData, 0o755);
  writeFileSync(join(root, `hook-${provider}.sh`), renderHookScript(options));
  writeFileSync(join(root, 'unit.service'), renderHookUnit(options));
  const install = join(root, `install-runner-${provider}.sh`);
  writeFileSync(install, renderInstallScript(options));
  chmodSync(install, 0o755);
  // A reusable pool's rendering (its own user and mapping; the same hook path, so PRIME installs it).
  const reuse = join(root, `user-data-${provider}-reuse.sh`);
  writeFileSync(
    reuse,
    renderUserData({
      ...options,
      runnerUser: reuseUser,
      hostPaths: { ...options.hostPaths, ...reusePaths },
      reuse: { scope: REUSE_SCOPE_OF[provider] ?? ReuseScope.REPOSITORY, maxJobs: REUSE_MAX_JOBS, maxAgeSeconds: 3600, cacheDirectories: reuseCaches },
    }),
  );
  chmodSync(reuse, 0o755);
  // Docker on (docs/docker.md): the install step's Docker, and for GitLab the docker executor
  // with a volume; alone and with reuse (docker.bats). The daemon bound is short: a test of a
  // daemon that never answers waits it out.
  const docker = { docker: { volumes: ['/cache'] }, dockerReadySeconds: seconds(5, 60) };
  for (const [name, extra] of Object.entries({ docker: {}, 'docker-reuse': { runnerUser: reuseUser, hostPaths: { ...options.hostPaths, ...reusePaths }, reuse: { scope: REUSE_SCOPE_OF[provider] ?? ReuseScope.REPOSITORY, maxJobs: REUSE_MAX_JOBS, maxAgeSeconds: 3600, cacheDirectories: reuseCaches } } })) {
    const file = join(root, `user-data-${provider}-${name}.sh`);
    writeFileSync(file, renderUserData({ ...options, ...docker, ...extra }));
    chmodSync(file, 0o755);
  }
  // An image without the aws CLI (Canonical's Ubuntu): the boot names it as production does
  // (`aws`, found on the PATH), and the snap's directory is the sandbox's, which the snap shim
  // fills (install.bats runs it with a PATH that has no aws).
  const noAws = join(root, `user-data-${provider}-no-aws.sh`);
  writeFileSync(noAws, renderUserData({ ...options, awsCli: 'aws', hostPaths: { ...options.hostPaths, snapBinDir: join(root, 'snap', 'bin') } }));
  chmodSync(noAws, 0o755);
  // A pool that follows the newest release: the install reads the resolved release first.
  // Extra CA certificates (docs/private-network.md): the digest of $ROOT/ca.pem, which ca.bats puts into the parameter.
  const ca = join(root, `user-data-${provider}-ca.sh`);
  writeFileSync(ca, renderUserData({ ...options, caCertificatesSha256: createHash('sha256').update(CA_PEM).digest('hex') }));
  chmodSync(ca, 0o755);
  const latest = join(root, `user-data-${provider}-latest.sh`);
  writeFileSync(latest, renderUserData({ ...options, followLatestRunner: true }));
  chmodSync(latest, 0o755);
  if (provider === 'github') {
    // One short bound each, with a read timeout longer than it: only the bound can stop a hung call.
    const short = {
      'short-wait': { waitSeconds: BOUNDS.shortWaitSeconds },
      'short-ship': { logShipSeconds: BOUNDS.shortShipSeconds },
    };
    for (const [name, bound] of Object.entries(short)) {
      const file = join(root, `user-data-github-${name}.sh`);
      writeFileSync(file, renderUserData({ ...options, ...bound, awsReadTimeoutSeconds: BOUNDS.slowReadTimeoutSeconds }));
      chmodSync(file, 0o755);
    }
  }
}
