import { describe, expect, it } from 'vitest';
import {
  affinityOf,
  AFFINITY_PATTERN,
  buildFleetConfig,
  cacheDirectoryProblem,
  decodeRunnerConfig,
  encodeParking,
  encodeRunnerConfig,
  parseParking,
  Provider,
  REUSE_DEFAULTS,
  ReuseScope,
  tagKeys,
  type FleetConfigInput,
  type PoolInput,
} from '../../lambdas/shared/contract';

const github = { provider: Provider.GITHUB, owner: 'Octo-Org', project: 'Hello.World', projectId: undefined };
const gitlab = { provider: Provider.GITLAB, owner: 'group/sub', project: 'app', projectId: 42 };

describe('affinityOf', () => {
  it('is the lower-cased repository for GitHub and the project id for GitLab, both matching the rendered pattern', () => {
    expect(affinityOf(github)).toBe('github:octo-org/hello.world');
    expect(affinityOf(gitlab)).toBe('gitlab:42');
    for (const a of [affinityOf(github), affinityOf(gitlab)]) expect(a).toMatch(new RegExp(AFFINITY_PATTERN));
  });

  it('refuses what could widen or break the key', () => {
    expect(() => affinityOf({ ...github, project: 'a b' })).toThrow(/owner\/name/);
    expect(() => affinityOf({ ...github, project: 'x/y' })).toThrow(/owner\/name/);
    expect(() => affinityOf({ ...gitlab, projectId: undefined })).toThrow(/project id/);
    expect(() => affinityOf({ ...gitlab, projectId: 0 })).toThrow(/project id/);
  });
});

describe('cacheDirectoryProblem', () => {
  it.each(['/var/cache/deps', '/home/runner/.cache', '/opt/toolcache', '/var/lib/docker'])('accepts %s', (dir) => {
    expect(cacheDirectoryProblem(dir)).toBeUndefined();
  });
  it.each([
    ['relative', 'var/cache', /absolute/],
    ['dot segment', '/var/cache/../etc', /"\." or "\.\."/],
    ['a system directory', '/etc/apt', /system directory \/etc/],
    ['a parent of a system directory', '/var', /system directory/],
    ['the root', '/', /absolute/],
    ['a temp directory', '/tmp/cache', /temp directory/],
    ['a space', '/var/cache/my dir', /absolute/],
  ])('refuses %s', (_what, dir, message) => {
    expect(cacheDirectoryProblem(dir)).toMatch(message);
  });
});

describe('runner config reuse keys', () => {
  const base = { provider: 'github' as const, instanceId: 'i-0123456789abcdef0', jitConfig: 'abc' };

  it('round-trips affinity and uses, and leaves them out for other pools', () => {
    const text = encodeRunnerConfig({ ...base, reuse: { affinity: 'github:o/r', uses: 3 } });
    expect(text).toContain('affinity=github:o/r\nuses=3\n');
    expect(decodeRunnerConfig(text)).toEqual({ ...base, reuse: { affinity: 'github:o/r', uses: 3 } });
    expect(encodeRunnerConfig(base)).not.toMatch(/affinity|uses/);
    expect(decodeRunnerConfig(encodeRunnerConfig(base))).toEqual(base);
  });

  it('refuses a half or malformed reuse pair', () => {
    expect(() => decodeRunnerConfig(`${encodeRunnerConfig(base)}affinity=github:o/r\n`)).toThrow(/lacks "uses"/);
    expect(() => decodeRunnerConfig(`${encodeRunnerConfig(base)}affinity=github:o/r\nuses=-1\n`)).toThrow(/non-negative/);
    expect(() => decodeRunnerConfig(`${encodeRunnerConfig(base)}affinity=bitbucket:x\nuses=1\n`)).toThrow(/does not match/);
    expect(() => encodeRunnerConfig({ ...base, reuse: { affinity: 'github:O/R', uses: 0 } })).toThrow(/does not match/);
  });
});

describe('parking tag', () => {
  it('names its activation and its start, and nothing else parses', () => {
    const at = '2026-12-04T10:00:00.000Z';
    const value = encodeParking(at, new Date('2026-12-04T10:05:00.000Z'));
    expect(parseParking(value)).toEqual({ activatedAt: at, since: new Date('2026-12-04T10:05:00.000Z') });
    expect(parseParking(undefined)).toBeUndefined();
    expect(parseParking(at)).toBeUndefined();
    expect(parseParking(`${at} nonsense`)).toBeUndefined();
    expect(parseParking(`${value} extra`)).toBeUndefined();
  });

  it('has its own tag keys beside the others', () => {
    const keys = tagKeys('wr');
    expect([keys.affinity, keys.uses, keys.parking]).toEqual(['wr:affinity', 'wr:uses', 'wr:parking']);
  });
});

describe('pool reuse in the FleetConfig', () => {
  const pool = (provider: Provider, reuse?: PoolInput['reuse']): PoolInput => ({
    name: 'p',
    provider,
    launchTemplateId: 'lt-1',
    launchTemplateVersion: '1',
    subnetIds: ['subnet-1'],
    instanceTypes: ['m7i.large'],
    ...(reuse ? { reuse } : {}),
  });
  const fleet = (p: PoolInput): FleetConfigInput => ({
    github: { appId: '1', organization: 'o' },
    gitlab: { url: 'https://gitlab.example.com' },
    pools: [p],
  });

  it('is absent by default and takes the provider scope and the defaults when on', () => {
    expect(buildFleetConfig(fleet(pool(Provider.GITHUB))).pools[0]!.reuse).toBeUndefined();
    expect(buildFleetConfig(fleet(pool(Provider.GITHUB, {}))).pools[0]!.reuse).toEqual({
      scope: ReuseScope.REPOSITORY,
      maxJobs: REUSE_DEFAULTS.maxJobs,
      maxAgeSeconds: REUSE_DEFAULTS.maxAgeSeconds,
      cacheDirectories: [],
    });
    expect(buildFleetConfig(fleet(pool(Provider.GITLAB, { cacheDirectories: ['/var/cache/deps'] }))).pools[0]!.reuse).toMatchObject({
      scope: ReuseScope.PROJECT,
      cacheDirectories: ['/var/cache/deps'],
    });
  });

  it.each([
    ['a scope wider than the provider offers', { scope: ReuseScope.PROJECT }, /pools\[0\]\.reuse\.scope.*shares caches only within one repository/],
    ['maxJobs 0', { maxJobs: 0 }, /pools\[0\]\.reuse\.maxJobs/],
    ['a max age below five minutes', { maxAgeSeconds: 60 }, /pools\[0\]\.reuse\.maxAgeSeconds/],
    ['a system cache directory', { cacheDirectories: ['/etc'] }, /system directory/],
    ['nested cache directories', { cacheDirectories: ['/var/cache/a', '/var/cache/a/b'] }, /inside another listed directory/],
    ['too many cache directories', { cacheDirectories: Array.from({ length: 17 }, (_, i) => `/var/cache/d${i}`) }, /at most 16/],
    ['cache directories over their total', { cacheDirectories: Array.from({ length: 6 }, (_, i) => `/var/cache/${'d'.repeat(80)}${i}`) }, /reuse\.cacheDirectories total 552 bytes, at most 512 fit in user data: list a common parent/],
  ])('refuses %s with a message naming the field', (_what, reuse, message) => {
    expect(() => buildFleetConfig(fleet(pool(Provider.GITHUB, reuse)))).toThrow(message);
  });
});
