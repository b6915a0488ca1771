import { describe, expect, it } from 'vitest';
import {
  activationTimeOfRunnerName,
  bootLogGroupName,
  buildFleetConfig,
  decodeRunnerConfig,
  encodeRunnerConfig,
  instanceIdOfRunnerName,
  parseFleetConfig,
  parseJobMessage,
  qualifiedJobId,
  runnerName,
  ssmPaths,
  instanceArn,
  instanceArnOf,
  LAMBDA_ENV,
  PARAMETER_INSTANCE_ARN_TAG,
  tagKeys,
  TAG_NAMES,
  warmSizeAt,
  scheduleOverlaps,
  LabelMatch,
  Provider,
  type FleetConfigInput,
  type JobMessage,
} from '../../lambdas/shared/contract';

const pool = {
  name: 'linux',
  provider: Provider.GITHUB,
  launchTemplateId: 'lt-0123456789abcdef0',
  launchTemplateVersion: '3',
  subnetIds: ['subnet-1'],
  instanceTypes: ['m7i.large'],
};
const input: FleetConfigInput = { github: { appId: '123', organization: 'acme' }, pools: [pool] };

describe('tag keys', () => {
  it('derives every key from the prefix, valid as instance-metadata tag keys', () => {
    const keys = tagKeys('ci-fleet');
    expect(Object.keys(keys).sort()).toEqual(Object.keys(TAG_NAMES).sort());
    for (const key of Object.values(keys)) {
      expect(key).toMatch(/^ci-fleet:[a-z-]+$/);
      expect(key).not.toMatch(/[/ ]/);
    }
    expect(new Set(Object.values(keys)).size).toBe(Object.keys(keys).length);
  });

  it.each(['', 'has/slash', 'has space', 'aws-fleet', 'SSM', 'x'.repeat(33), '-lead'])('rejects prefix %j', (prefix) => {
    expect(() => tagKeys(prefix)).toThrow(/prefix/);
  });
});

describe('ssm paths', () => {
  const paths = ssmPaths('fleet');
  it('names one config parameter per instance and maps it back', () => {
    expect(paths.runnerConfig('i-0123456789abcdef0')).toBe('/fleet/runners/config/i-0123456789abcdef0');
    expect(paths.instanceIdOf('/fleet/runners/config/i-0123456789abcdef0')).toBe('i-0123456789abcdef0');
    expect(paths.instanceIdOf('/fleet/ci/github/app-private-key')).toBeUndefined();
    expect(paths.instanceIdOf('/other/runners/config/i-0123456789abcdef0')).toBeUndefined();
  });
  it('refuses a non-instance id, so no path can escape the config root', () => {
    expect(() => paths.runnerConfig('../ci/github')).toThrow(/not an EC2 instance id/);
  });
  it('builds instance ARNs for the parameter tag IAM compares with ec2:SourceInstanceARN', () => {
    expect(PARAMETER_INSTANCE_ARN_TAG).toBe('instance-arn');
    expect(LAMBDA_ENV.instanceArnPrefix).toBe('INSTANCE_ARN_PREFIX');
    expect(instanceArn('aws', 'eu-west-1', '111122223333', 'i-0123456789abcdef0')).toBe('arn:aws:ec2:eu-west-1:111122223333:instance/i-0123456789abcdef0');
    expect(instanceArnOf('arn:aws-cn:ec2:cn-north-1:111122223333:instance/')('i-0123456789abcdef0')).toBe(
      'arn:aws-cn:ec2:cn-north-1:111122223333:instance/i-0123456789abcdef0',
    );
    expect(() => instanceArn('aws', 'eu-west-1', '111122223333', '../x')).toThrow(/not an EC2 instance id/);
    for (const bad of ['', 'arn:aws:ec2:eu-west-1:111122223333:instance', 'arn:aws:ec2:eu-west-1:1111:instance/', 'arn:aws:ec2:Europe:111122223333:instance/', 'arn:aws:s3:eu-west-1:111122223333:instance/']) {
      expect(() => instanceArnOf(bad), bad).toThrow(/instance ARN prefix|not a 12-digit|not an AWS region/);
    }
  });
  it('keeps credentials under /<prefix>/ci/', () => {
    for (const name of [...Object.values(paths.github), ...Object.values(paths.gitlab)]) expect(name.startsWith('/fleet/ci/')).toBe(true);
    expect(paths.fleetConfig.startsWith(paths.ciRoot)).toBe(false);
    expect(paths.fleetConfig.startsWith(paths.runnerConfigRoot)).toBe(false);
  });
});

describe('boot log group', () => {
  it('is one group per fleet under the prefix; stream names are instance ids', () => {
    expect(bootLogGroupName('fleet')).toBe('/fleet/runners/boot');
    expect(bootLogGroupName('warm-runners')).toBe('/warm-runners/runners/boot');
  });
  it('refuses a prefix that SSM paths refuse too', () => {
    expect(() => bootLogGroupName('bad prefix')).toThrow(/prefix/);
  });
});

describe('runner config', () => {
  it('round-trips both providers', () => {
    const gh = { provider: 'github' as const, instanceId: 'i-0123456789abcdef0', jitConfig: 'eyJhIjoiYj0ifQ==' };
    const gl = { provider: 'gitlab' as const, instanceId: 'i-0fedcba9876543210', url: 'https://gitlab.example.com', token: 'glrt-abc' };
    expect(decodeRunnerConfig(encodeRunnerConfig(gh))).toEqual(gh);
    expect(decodeRunnerConfig(encodeRunnerConfig(gl))).toEqual(gl);
  });
  it('refuses values the shell parser could split, without echoing the secret', () => {
    expect(() => encodeRunnerConfig({ provider: Provider.GITHUB, instanceId: 'i-0123456789abcdef0', jitConfig: 'se cret\nx=1' })).toThrow(/"jitconfig"/);
    try {
      encodeRunnerConfig({ provider: Provider.GITHUB, instanceId: 'i-0123456789abcdef0', jitConfig: 'se cret' });
    } catch (e) {
      expect((e as Error).message).not.toContain('se cret');
    }
  });
  it('rejects malformed or incomplete content', () => {
    expect(() => decodeRunnerConfig('version=1\nprovider=gitlab\ninstance=i-0123456789abcdef0\nurl=https://x\n')).toThrow(/lacks "token"/);
    expect(() => decodeRunnerConfig('version=2\nprovider=github\njitconfig=x\n')).toThrow(/version/);
    expect(() => decodeRunnerConfig('garbage')).toThrow(/key=/);
  });
  it('names the instance it is for, and refuses a config that names none or no instance id', () => {
    const text = encodeRunnerConfig({ provider: Provider.GITHUB, instanceId: 'i-0123456789abcdef0', jitConfig: 'x' });
    expect(text.split('\n')).toContain('instance=i-0123456789abcdef0');
    expect(() => decodeRunnerConfig('version=1\nprovider=github\njitconfig=x\n')).toThrow(/lacks "instance"/);
    expect(() => decodeRunnerConfig('version=1\nprovider=github\ninstance=me\njitconfig=x\n')).toThrow(/not an EC2 instance id/);
    expect(() => encodeRunnerConfig({ provider: Provider.GITHUB, instanceId: 'i-x', jitConfig: 'x' })).toThrow(/not an EC2 instance id/);
  });
});

describe('runner names', () => {
  it('are unique per activation and keep the instance id', () => {
    const a = runnerName('fleet', 'i-0123456789abcdef0', new Date(1_000));
    const b = runnerName('fleet', 'i-0123456789abcdef0', new Date(2_000));
    expect(a).not.toBe(b);
    expect(instanceIdOfRunnerName('fleet', a)).toBe('i-0123456789abcdef0');
    expect(instanceIdOfRunnerName('other', a)).toBeUndefined();
  });
});

describe('job message', () => {
  const job: JobMessage = {
    schemaVersion: 1,
    provider: Provider.GITLAB,
    jobId: qualifiedJobId(Provider.GITLAB, '42'),
    providerJobId: '42',
    pool: 'linux',
    owner: 'group',
    project: 'app',
    projectId: 7,
    labels: ['linux'],
    labelsResolved: true,
    traceId: 'trace-1',
    deliveryId: 'd-1',
    receivedAt: '2026-11-29T10:00:00.000Z',
  };
  it('round-trips through JSON, with and without the job\'s creation time', () => {
    expect(parseJobMessage(JSON.stringify(job))).toEqual(job);
    const created = { ...job, createdAt: '2026-11-29T09:58:00.000Z' };
    expect(parseJobMessage(JSON.stringify(created))).toEqual(created);
  });
  it('qualifies ids by provider so GitHub and GitLab cannot collide', () => {
    expect(qualifiedJobId(Provider.GITHUB, 42)).not.toBe(qualifiedJobId(Provider.GITLAB, 42));
  });
  it.each([
    ['not json', '{', /not JSON/],
    ['wrong version', JSON.stringify({ ...job, schemaVersion: 2 }), /schemaVersion/],
    ['unqualified id', JSON.stringify({ ...job, jobId: '42' }), /jobId/],
    ['bad provider', JSON.stringify({ ...job, provider: 'jenkins' }), /provider/],
    ['bad trace id', JSON.stringify({ ...job, traceId: 'a b' }), /traceId/],
    ['labels not list', JSON.stringify({ ...job, labels: 'linux' }), /labels/],
    ['bad time', JSON.stringify({ ...job, receivedAt: 'yesterday' }), /receivedAt/],
    ['bad creation time', JSON.stringify({ ...job, createdAt: 'yesterday' }), /createdAt/],
  ])('rejects %s', (_name, body, error) => {
    expect(() => parseJobMessage(body)).toThrow(error);
  });
});

describe('fleet config', () => {
  it('applies defaults and survives a round trip through the reader', () => {
    const config = buildFleetConfig(input);
    expect(config.prefix).toBe('warm-runners');
    expect(config.pools[0]).toMatchObject({ labels: ['linux'], maxRunners: 10, spot: false, labelMatch: LabelMatch.EXACT });
    expect(parseFleetConfig(JSON.stringify(config))).toEqual(config);
  });

  it.each([
    ['warm size above maximum', { ...pool, warmSize: 11, maxRunners: 10 }, /warm\.size is 11, above the pool's maxRunners 10/],
    ['empty instance types', { ...pool, instanceTypes: [] }, /pools\[0\]\.instanceTypes is empty; list at least one/],
    ['bad label', { ...pool, labels: ['ok', 'has space'] }, /pools\[0\]\.labels\[1\] "has space" must be/],
    ['bad schedule', { ...pool, warmSchedule: [{ window: 'weekdays 8-6', size: 1 }] }, /window "weekdays 8-6"/],
    ['provider without connection', { ...pool, provider: Provider.GITLAB }, /no gitlab connection is configured/],
    ['bad pool name', { ...pool, name: 'a/b' }, /pools\[0\]\.name "a\/b" must be/],
  ])('names the bad value: %s', (_name, badPool, error) => {
    expect(() => buildFleetConfig({ ...input, pools: [badPool] })).toThrow(error);
  });

  it('accepts maxRunners 0 (a paused pool), with the warm sizes it keeps for when it resumes; refuses a negative one', () => {
    const paused = buildFleetConfig({ ...input, pools: [{ ...pool, maxRunners: 0, warmSize: 3, warmSchedule: [{ window: 'MON-FRI 07:00-19:00', size: 5 }] }] });
    expect(paused.pools[0]).toMatchObject({ maxRunners: 0, warm: { size: 3 } });
    expect(parseFleetConfig(JSON.stringify(paused))).toEqual(paused);
    expect(() => buildFleetConfig({ ...input, pools: [{ ...pool, maxRunners: -1 }] })).toThrow(/pools\[0\]\.maxRunners must be a whole number from 0 to 10000, got -1/);
    // Above a maxRunners of 1 or more the warm sizes are still refused.
    expect(() => buildFleetConfig({ ...input, pools: [{ ...pool, maxRunners: 1, warmSchedule: [{ window: 'MON 01:00-02:00', size: 2 }] }] })).toThrow(/warm\.schedule\[0\]\.size is 2, above the pool's maxRunners 1/);
  });

  it('rejects duplicate pools, a bad prefix and GitLab without URL', () => {
    expect(() => buildFleetConfig({ ...input, pools: [pool, pool] })).toThrow(/unique/);
    expect(() => buildFleetConfig({ ...input, prefix: 'a/b' })).toThrow(/prefix/);
    expect(() => buildFleetConfig({ ...input, gitlab: { url: '' } })).toThrow(/gitlab\.url/);
  });

  it("puts each prefix's metrics in a namespace of its own, and refuses one CloudWatch refuses", () => {
    expect(buildFleetConfig(input).metrics.namespace).toBe('CdkWarmRunners/warm-runners');
    expect(buildFleetConfig({ ...input, prefix: 'team-b' }).metrics.namespace).toBe('CdkWarmRunners/team-b');
    expect(buildFleetConfig({ ...input, metricNamespace: 'Ci/Fleet' }).metrics.namespace).toBe('Ci/Fleet');
    expect(() => buildFleetConfig({ ...input, metricNamespace: 'AWS/EC2' })).toThrow(/metrics\.namespace "AWS\/EC2" must/);
    const config = { ...buildFleetConfig(input), metrics: { ...buildFleetConfig(input).metrics, namespace: 'bad|name' } };
    expect(() => parseFleetConfig(JSON.stringify(config))).toThrow(/metrics\.namespace "bad\|name" must/);
  });

  it('reports a newer version instead of misreading it', () => {
    const config = { ...buildFleetConfig(input), version: 2 };
    expect(() => parseFleetConfig(JSON.stringify(config))).toThrow(/version must be 1/);
  });
});

describe('warm schedule', () => {
  const schedule = [
    { window: 'MON-FRI 07:00-19:00', size: 5 },
    { window: 'FRI 22:00-02:00', size: 1 },
  ];
  it.each([
    ['2026-11-30T08:00:00Z', 5], // Monday inside
    ['2026-11-30T19:00:00Z', 2], // Monday at the end: outside
    ['2026-11-29T08:00:00Z', 2], // Sunday
    ['2026-12-04T23:00:00Z', 1], // Friday night
    ['2026-12-05T01:59:00Z', 1], // wraps into Saturday
    ['2026-12-05T02:00:00Z', 2],
  ])('at %s the size is %i', (at, size) => {
    expect(warmSizeAt(2, schedule, new Date(at))).toBe(size);
  });

  it.each<[string, { window: string; size: number }[], unknown[]]>([
    ['windows apart', [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: 'SAT,SUN 07:00-19:00', size: 1 }], []],
    ['touching ends do not overlap (the end is outside)', [{ window: 'MON 07:00-12:00', size: 5 }, { window: 'MON 12:00-19:00', size: 1 }], []],
    ['overlapping, different sizes: the earlier wins there', [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: '* 18:00-20:00', size: 1 }], [{ kind: 'overlap', later: 1, earlier: [0] }]],
    ['overlapping, the same size: nothing decides anything', [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: '* 18:00-20:00', size: 5 }], []],
    ['inside an earlier window: never applies', [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: 'WED 09:00-10:00', size: 8 }], [{ kind: 'shadowed', later: 1, earlier: [0] }]],
    ['covered by two earlier windows together', [{ window: 'MON 00:00-12:00', size: 1 }, { window: 'MON 12:00-00:00', size: 2 }, { window: 'MON 06:00-18:00', size: 3 }], [{ kind: 'shadowed', later: 2, earlier: [0, 1] }]],
    ['a window past midnight overlapping the next day\'s', [{ window: 'FRI 22:00-02:00', size: 1 }, { window: 'SAT 01:00-03:00', size: 4 }], [{ kind: 'overlap', later: 1, earlier: [0] }]],
    [
      'three windows: a pair whose shared minutes an even earlier window takes decides nothing',
      [{ window: 'MON 07:00-12:00', size: 2 }, { window: 'MON 08:00-20:00', size: 3 }, { window: 'MON 06:00-10:00', size: 2 }],
      [{ kind: 'overlap', later: 1, earlier: [0] }],
    ],
    ['a narrow window before a broad one: the intended way to write an exception', [{ window: 'WED 09:00-10:00', size: 8 }, { window: 'MON-FRI 07:00-19:00', size: 5 }], [{ kind: 'overlap', later: 1, earlier: [0] }]],
  ])('overlaps: %s', (_name, entries, expected) => {
    expect(scheduleOverlaps(entries)).toEqual(expected);
  });
});

describe('runner name activation time', () => {
  it('recovers the activation time of a name built by runnerName, nothing from others', () => {
    const at = new Date('2026-11-29T12:00:00.123Z');
    expect(activationTimeOfRunnerName('fleet', runnerName('fleet', 'i-0123456789abcdef0', at))).toEqual(at);
    expect(activationTimeOfRunnerName('fleet', 'someone-elses-runner')).toBeUndefined();
    expect(activationTimeOfRunnerName('other', runnerName('fleet', 'i-0123456789abcdef0', at))).toBeUndefined();
  });
});
