/**
 * Renders the boot script into a sandbox directory for the bats harness and the boot
 * benchmark: the same renderer as production (lib/user-data.ts), with every host path under
 * the sandbox, the loopback IMDS and AWS endpoints, and time bounds of a few seconds.
 *
 *   node --import tsx test/templates/render-sandbox.ts --root DIR --imds URL --aws URL \
 *     --aws-cli PATH --runner-user USER [--wait-seconds N]
 *
 * Writes DIR/user-data-<provider>.sh, DIR/hook-<provider>.sh (what PRIME must install) and
 * DIR/unit.service (what PRIME must write) for both providers, DIR/user-data-github-slow-read.sh
 * (a 30 s CLI read timeout, longer than the WAIT bound), and DIR/contract.env: the
 * contract's values the tests need, as shell assignments.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BOOT_LOG_KEYS, PROVIDERS, WARM_STANDBY_VALUE, bootLogGroupName, ssmPaths, tagKeys } from '../../lambdas/shared/contract';
import {
  START_LOGIC_MARKERS,
  renderHookScript,
  renderHookUnit,
  renderUserData,
  shellQuote,
  type UserDataOptions,
} from '../../lib/user-data';

const { values } = parseArgs({
  options: {
    root: { type: 'string' },
    imds: { type: 'string' },
    aws: { type: 'string' },
    'aws-cli': { type: 'string' },
    'runner-user': { type: 'string' },
    'wait-seconds': { type: 'string', default: '6' },
  },
  strict: true,
});
const { root, imds, aws } = values;
const awsCli = values['aws-cli'];
const runnerUser = values['runner-user'];
if (!root || !imds || !aws || !awsCli || !runnerUser) {
  console.error('usage: render-sandbox.ts --root DIR --imds URL --aws URL --aws-cli PATH --runner-user USER [--wait-seconds N]');
  process.exit(2);
}

const prefix = 'sandbox';
const tags = tagKeys(prefix);
// The contract's values for the bats files, so they spell no tag key or log key either.
const contract: Record<string, string> = {
  PREFIX: prefix,
  TAG_POOL: tags.pool,
  TAG_WARM: tags.warmStandby,
  WARM_VALUE: WARM_STANDBY_VALUE,
  TAG_ACTIVATED: tags.activatedAt,
  TAG_TRACE: tags.traceId,
  TAG_JOB: tags.jobId,
  CONFIG_ROOT: ssmPaths(prefix).runnerConfigRoot,
  LOG_MODE: BOOT_LOG_KEYS.mode,
  LOG_TRACE: BOOT_LOG_KEYS.traceId,
  LOG_LATENCY: BOOT_LOG_KEYS.activationLatency,
  LOG_GROUP: bootLogGroupName(prefix),
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
    waitSeconds: Number(values['wait-seconds']),
    pollSeconds: 0.3,
    retryDelaySeconds: 0.1,
    imdsAttempts: 3,
    awsAttempts: 3,
    httpTimeoutSeconds: 1,
    // Short, but well above what moto takes to answer on a loaded machine.
    awsConnectTimeoutSeconds: 2,
    awsReadTimeoutSeconds: 2,
    awsCliMaxAttempts: 2,
    runnerWaitTimeoutSeconds: 42,
    // Long enough for two CLI calls on a loaded machine; a hung endpoint costs the boot this.
    logShipSeconds: 5,
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
  if (provider === 'github') {
    // A read timeout longer than the WAIT bound: only the bound itself can stop a hung call.
    const slow = join(root, 'user-data-github-slow-read.sh');
    writeFileSync(slow, renderUserData({ ...options, awsReadTimeoutSeconds: 30 }));
    chmodSync(slow, 0o755);
  }
}
