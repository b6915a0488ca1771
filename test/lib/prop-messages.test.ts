import { App, Duration, Size, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { RunnerVersion, WarmRunners, type RunnerPoolProps, type WarmRunnersProps } from '../../lib';
import { buildFleetConfig, GitLabRunnerType, parseFleetConfig, Provider, ReuseScope } from '../../lambdas/shared/contract';
import { DEFAULT_RUNNER_PACKAGES } from '../../lambdas/shared/contract/runner-packages';

/**
 * Every prop driven with a bad value: the message names the prop as the user wrote it and says
 * the bound in words. One row per check the props can reach (lib/validate.ts, the contract's
 * FleetConfig check, the boot script's rendering).
 */
const image = ec2.MachineImage.latestAmazonLinux2023();
const base = (): WarmRunnersProps => ({
  vpc: new ec2.Vpc(new Stack(new App(), 'V'), 'Vpc'),
  github: { appId: '1', organization: 'org' },
  gitlab: { url: 'https://gitlab.example.com' },
  pools: [
    { name: 'linux', provider: Provider.GITHUB, machineImage: image },
    { name: 'gl', provider: Provider.GITLAB, machineImage: image },
  ],
});
type Change = (p: WarmRunnersProps) => WarmRunnersProps;
const pool0 = (extra: Partial<RunnerPoolProps>): Change => (p) => ({ ...p, pools: [{ ...p.pools[0]!, ...extra }, p.pools[1]!] });
const fleet = (extra: Partial<WarmRunnersProps>): Change => (p) => ({ ...p, ...extra });

function messageOf(change: Change): string {
  const props = change(base());
  try {
    new WarmRunners(props.vpc.stack, 'Runners', props);
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('no error');
}

// [the prop path the message starts with, the change]
const ROWS: [string, Change][] = [
  ['prefix', fleet({ prefix: 'ci/fleet' })],
  ['pools', fleet({ pools: [] })],
  ['github.appId', fleet({ github: { appId: '', organization: 'org' } })],
  ['gitlab.reconcileProjectIds[1]', fleet({ gitlab: { url: 'https://gitlab.example.com', reconcileProjectIds: [4, 0] } })],
  ['pools[0].organization', fleet({ github: { appId: '1' } })],
  ['github.repositories[1]', fleet({ github: { appId: '1', repositories: ['o/r', 'no-slash'] } })],
  ['github.runnerGroupId', fleet({ github: { appId: '1', organization: 'org', runnerGroupId: 0 } })],
  ['github.apiUrl', fleet({ github: { appId: '1', organization: 'org', apiUrl: 'ftp://x' } })],
  ['gitlab.url', fleet({ gitlab: { url: 'gitlab.com' } })],
  ['gitlab.runnerType', fleet({ gitlab: { url: 'https://gitlab.com', runnerType: 'fleet_type' as GitLabRunnerType } })],
  ['gitlab.scopeId', fleet({ gitlab: { url: 'https://gitlab.com', runnerType: GitLabRunnerType.GROUP } })],
  ['gitlab.scopeId', fleet({ gitlab: { url: 'https://gitlab.com', runnerType: GitLabRunnerType.PROJECT, scopeId: 1.5 } })],
  ['gitlab.webhookId', fleet({ gitlab: { url: 'https://gitlab.com', runnerType: GitLabRunnerType.PROJECT, scopeId: 5, webhookId: 0 } })],
  ['gitlab.webhookId', fleet({ gitlab: { url: 'https://gitlab.com', webhookId: 3 } })],
  ['gitlab.webhookProjectId', fleet({ gitlab: { url: 'https://gitlab.com', webhookId: 3, webhookProjectId: -1 } })],
  ['gitlab.webhookGroupId', fleet({ gitlab: { url: 'https://gitlab.com', webhookId: 3, webhookGroupId: 0 } })],
  ['gitlab.webhookProjectId', fleet({ gitlab: { url: 'https://gitlab.com', webhookProjectId: 4 } })],
  ['gitlab.reconcileProjectIds', fleet({ gitlab: { url: 'https://gitlab.com', reconcileProjectIds: [0] } })],
  ['metricNamespace', fleet({ metricNamespace: 'AWS/Mine' })],
  ['scaleUpBatchSize', fleet({ scaleUpBatchSize: 11 })],
  ['scaleUpMaxConcurrency', fleet({ scaleUpMaxConcurrency: 1 })],
  ['webhookReservedConcurrency', fleet({ webhookReservedConcurrency: 0 })],
  ['redeliverLimit', fleet({ redeliverLimit: -1 })],
  ['reconcileRunReadLimit', fleet({ reconcileRunReadLimit: 1001 })],
  ['reconcileRepositoriesPerRun', fleet({ reconcileRepositoriesPerRun: 0 })],
  ['jobRetryAfter', fleet({ jobRetryAfter: Duration.seconds(30) })],
  ['jobRetryLimit', fleet({ jobRetryLimit: 11 })],
  ['poolInterval', fleet({ poolInterval: Duration.seconds(30) })],
  ['scaleDownInterval', fleet({ scaleDownInterval: Duration.seconds(90) })],
  ['reconcileInterval', fleet({ reconcileInterval: Duration.seconds(30) })],
  ['rootDeviceName (for pool "linux")', (p) => ({ ...fleet({ rootDeviceName: 'sda' })(p), pools: [{ ...p.pools[0]!, machineImage: ec2.MachineImage.genericLinux({ 'eu-west-1': 'ami-1' }) }] })],
  ['pools[0].name', pool0({ name: 'has space' })],
  ['pools[1].name', (p) => ({ ...p, pools: [p.pools[0]!, p.pools[0]!] })],
  ['pools[0].provider', (p) => ({ ...p, gitlab: undefined, pools: [{ ...p.pools[1]!, name: 'x' }] })],
  ['pools[0].labels[0]', pool0({ labels: ['has space'] })],
  ['pools[0].labels[1]', pool0({ labels: ['ok', ''] })],
  ['pools[0].labelMatch', pool0({ labelMatch: 'fuzzy' as never })],
  ['pools[0].instanceTypes', pool0({ instanceTypes: [] })],
  ['pools[0].instanceTypes', pool0({ instanceTypes: [new ec2.InstanceType('m7i.large'), new ec2.InstanceType('m7g.large')] })],
  ['pools[0].diskSize', pool0({ diskSize: Size.gibibytes(4) })],
  ['pools[0].maxRunners', pool0({ maxRunners: -1 })],
  ['pools[0].maxRunners', pool0({ maxRunners: 10_001 })],
  ['pools[0].maxRunners', pool0({ maxRunners: 1.5 })],
  ['pools[0].idleTimeout', pool0({ idleTimeout: Duration.seconds(30) })],
  ['pools[0].idleConfirmation', pool0({ idleConfirmation: Duration.days(2) })],
  ['pools[0].maxJobDuration', pool0({ maxJobDuration: Duration.days(31) })],
  ['pools[0].warm.size', pool0({ maxRunners: 2, warm: { size: 3 } })],
  ['pools[0].warm.size', pool0({ warm: { size: -1 } })],
  ['pools[0].warm.schedule[1].window', pool0({ warm: { schedule: [{ window: 'MON 01:00-02:00', size: 1 }, { window: 'weekdays', size: 1 }] } })],
  ['pools[0].warm.schedule[0].size', pool0({ warm: { schedule: [{ window: 'MON 01:00-02:00', size: 99 }] } })],
  ['pools[0].warm.maxAge', pool0({ warm: { maxAge: Duration.minutes(1) } })],
  ['pools[0].warm.primingTimeout', pool0({ warm: { primingTimeout: Duration.seconds(30) } })],
  ['pools[0].warm.primingTimeout', pool0({ warm: { primingTimeout: Duration.minutes(60) } })],
  ['pools[0].warm.primeFailureLimit', pool0({ warm: { primeFailureLimit: 0 } })],
  ['pools[0].warm.primeBackoffCap', pool0({ warm: { primeBackoffCap: Duration.days(2) } })],
  ['pools[0].prepareCommands (pool "linux") and warm.prepareCommands are both set', pool0({ prepareCommands: ['true'], warm: { prepareCommands: ['true'] } })],
  ['pools[0].prepareCommands[1]', pool0({ prepareCommands: ['true', 'echo \0'] })],
  ['pools[0] (pool "linux"): cannot render the boot script', pool0({ prepareCommands: Array.from({ length: 16 }, (_, i) => `echo ${i} ${'x'.repeat(400)}`) })],
  ['pools[0] (pool "linux"): cannot render the boot script', pool0({ runnerUser: 'bad user' })],
  ['pools[0].runnerVersion (pool "linux") is RunnerVersion.latest()', pool0({ runnerVersion: RunnerVersion.latest(), runnerPackage: DEFAULT_RUNNER_PACKAGES.github })],
  ['pools[0].rootDeviceName', pool0({ rootDeviceName: '/dev/sda1' })],
  ['pools[0].reuse.maxJobs', pool0({ reuse: { maxJobs: 0 } })],
  ['pools[0].reuse.maxAge', pool0({ reuse: { maxAge: Duration.minutes(1) } })],
  ['pools[0].reuse.scope', pool0({ reuse: { scope: ReuseScope.PROJECT } })],
  ['pools[0].reuse.cacheDirectories[1]', pool0({ reuse: { cacheDirectories: ['/var/cache/a', 'relative'] } })],
  ['pools[0].reuse.cacheDirectories', pool0({ reuse: { cacheDirectories: Array.from({ length: 17 }, (_, i) => `/var/cache/c${i}`) } })],
  ['pools[0].reuse.cacheDirectories', pool0({ reuse: { cacheDirectories: ['/var/cache/a', '/var/cache/a/b'] } })],
  ['pools[0].reuse.cacheDirectories[0]', pool0({ reuse: { cacheDirectories: ['/home/runner'] } })],
  ['pools[0].runnerDirectory', pool0({ runnerDirectory: '/home/runner/actions', reuse: {} })],
  // Runner scale sets (docs/scale-set.md).
  ['pools[1].scaleSetName (pool "gl") is set on a gitlab pool', (p) => ({ ...p, pools: [p.pools[0]!, { ...p.pools[1]!, scaleSetName: 'gl-set' }] })],
  ['pools[0].scaleSetName', pool0({ scaleSetName: 'has space' })],
  ['pools[0].scaleSetName', pool0({ scaleSetName: 'x'.repeat(46) })],
  ['pools[0].scaleSetName', pool0({ scaleSetName: 'Self-Hosted' })],
  ['pools[0].scaleSetName', pool0({ scaleSetRunnerGroup: 'ci' })],
  ['pools[0].scaleSetRunnerGroup', pool0({ scaleSetName: 'fast', scaleSetRunnerGroup: '' })],
  ['pools[0].scaleSetName (pool "linux") is set on a pool that serves 2 repositories', pool0({ scaleSetName: 'fast', organization: undefined, repositories: ['org/a', 'org/b'] })],
  ['pools[0].scaleSetName (pool "linux") is set on a pool whose runners register at the enterprise', pool0({ scaleSetName: 'fast', enterprise: 'ent' })],
  ['pools[0].reuse (pool "linux") is set on a scale-set pool', pool0({ scaleSetName: 'fast', reuse: {}, warm: { size: 1 } })],
  [
    'pools[1].scaleSetName (pool "b") "FAST" is also the scale set of pool "linux" in organisation org',
    (p) => ({ ...p, pools: [{ ...p.pools[0]!, scaleSetName: 'fast' }, { ...p.pools[0]!, name: 'b', labels: ['b'], scaleSetName: 'FAST' }] }),
  ],
  [
    'pools[1].scaleSetName (pool "b") "Fast" is also the scale set of pool "linux" in organisation org, which holds repository org/app',
    (p) => ({ ...p, pools: [{ ...p.pools[0]!, scaleSetName: 'fast' }, { ...p.pools[0]!, name: 'b', labels: ['b'], organization: undefined, repositories: ['org/app'], scaleSetName: 'Fast' }] }),
  ],
  [
    'pools[0].scaleSetName (pool "linux") "fast" is also the scale set of pool "b" in organisation org, which holds repository org/app',
    (p) => ({ ...p, pools: [{ ...p.pools[0]!, organization: undefined, repositories: ['org/app'], scaleSetName: 'fast' }, { ...p.pools[0]!, name: 'b', labels: ['b'], scaleSetName: 'fast' }] }),
  ],
  [
    'pools[1].labels (pool "b") include "FAST", the name of pool "linux"\'s scale set in organisation org',
    (p) => ({ ...p, pools: [{ ...p.pools[0]!, scaleSetName: 'fast' }, { ...p.pools[0]!, name: 'b', labels: ['linux', 'FAST'], organization: undefined, repositories: ['org/app'] }] }),
  ],
];

/** What a user never wrote: FleetConfig field names, dotted indices, raw number limits. */
const INTERNAL = /pools\.\d|scaleSet\.|\b\w+Seconds\b|warmSize|warmSchedule|launchTemplate(Id|Version)|subnetIds|imageParameter|metrics\.namespace|parameters\.|webhook\.(hookId|ownerId|owner)\b|fleet config/;

function garbled(message: string): string[] {
  const found: string[] = [];
  if (/9007199254740991|MAX_SAFE/.test(message)) found.push('a raw MAX_SAFE_INTEGER');
  if (/at least 0\b/.test(message)) found.push('"at least 0"');
  const doubled = /\b([A-Za-z][\w.]*)\s+\1\b/i.exec(message);
  if (doubled) found.push(`a doubled "${doubled[1]}"`);
  return found;
}

describe('prop validation messages', () => {
  it.each(ROWS)('%s', (path, change) => {
    const message = messageOf(change);
    expect(message.startsWith(path), message).toBe(true);
    expect(message, 'an internal field name').not.toMatch(INTERNAL);
    expect(garbled(message), message).toEqual([]);
  });

  it('names a pool\'s field by its prop path and its pool, each problem of several', () => {
    const message = messageOf(pool0({ maxRunners: 2, warm: { size: 3, maxAge: Duration.minutes(1) }, labels: ['a b'] }));
    expect(message).toBe(
      'pools[0].labels[0] (pool "linux") "a b" must be 1-64 characters of letters, digits, "_", ".", ":", "+" or "-", starting with a letter or digit; ' +
        'pools[0].warm.size (pool "linux") is 3, above the pool\'s maxRunners 2; lower it or raise maxRunners; ' +
        'pools[0].warm.maxAge (pool "linux") must be at least 5 minutes, got 1 minute',
    );
  });
});

describe('a bad pool name', () => {
  it('is reported once, not again as the label it defaulted to; labels written out are still checked', () => {
    expect(messageOf(pool0({ name: '' }))).not.toMatch(/labels/);
    expect(messageOf(pool0({ name: '' }))).toMatch(/^pools\[0\]\.name/);
    expect(messageOf(pool0({ name: '', labels: ['a b'] }))).toMatch(/pools\[0\]\.labels\[0\]/);
  });
});

describe('fleet config messages at runtime (the parameter read back)', () => {
  const valid = () =>
    JSON.parse(
      JSON.stringify(
        buildFleetConfig({
          github: { appId: '1', organization: 'org' },
          pools: [{ name: 'linux', provider: Provider.GITHUB, launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['m7i.large'], reuse: {} }],
        }),
      ),
    ) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const rows: [string, (c: Record<string, any>) => void][] = [ // eslint-disable-line @typescript-eslint/no-explicit-any
    ['pools[0].labels[0]', (c) => (c.pools[0].labels = [''])],
    ['pools[0].labels', (c) => (c.pools[0].labels = 'linux')],
    ['pools[0].subnetIds', (c) => (c.pools[0].subnetIds = [])],
    ['pools[0].instanceTypes[0]', (c) => (c.pools[0].instanceTypes = [7])],
    ['pools[0].idleTimeoutSeconds', (c) => (c.pools[0].idleTimeoutSeconds = 10)],
    ['pools[0].warm.maxAgeSeconds', (c) => (c.pools[0].warm.maxAgeSeconds = 'a day')],
    ['pools[0].maxRunners', (c) => delete c.pools[0].maxRunners],
    ['pools[0].name', (c) => (c.pools[0].name = 'a b')],
    ['pools[0].reuse.cacheDirectories[0]', (c) => (c.pools[0].reuse.cacheDirectories = ['/tmp/x'])],
    ['github.runnerGroupId', (c) => (c.github.runnerGroupId = -2)],
    ['metrics.namespace', (c) => (c.metrics.namespace = 'AWS/x')],
    ['prefix', (c) => (c.prefix = 'aws-x')],
  ];
  it.each(rows)('%s', (path, change) => {
    const config = valid();
    change(config);
    let message = '';
    try {
      parseFleetConfig(JSON.stringify(config));
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message.startsWith(`invalid fleet config: ${path} `), message).toBe(true);
    expect(garbled(message), message).toEqual([]);
  });

  it('says an unbounded integer and a duration in words', () => {
    const config = valid();
    config.github.runnerGroupId = 0;
    config.pools[0].idleTimeoutSeconds = 30;
    expect(() => parseFleetConfig(JSON.stringify(config))).toThrow(
      'invalid fleet config: github.runnerGroupId must be a whole number of at least 1, got 0; pools[0].idleTimeoutSeconds must be at least 1 minute, got 30 seconds',
    );
  });
});
