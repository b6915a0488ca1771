import { describe, expect, it } from 'vitest';
import { buildFleetConfig, LabelMatch, Provider, type PoolConfig, type PoolInput } from '../../lambdas/shared/contract';
import { matchJobPool, matchPool } from '../../lambdas/shared/match-pool';

const base = { launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
const pool = (p: Partial<PoolInput> & Pick<PoolInput, 'name' | 'provider'>): PoolInput => ({ ...base, ...p });

const config = buildFleetConfig({
  github: { appId: '1', organization: 'acme' },
  gitlab: { url: 'https://gitlab.example.com' },
  pools: [
    pool({ name: 'gh-linux', provider: Provider.GITHUB, labels: ['linux', 'x64'], labelMatch: LabelMatch.EXACT }),
    pool({ name: 'gh-gpu', provider: Provider.GITHUB, labels: ['linux', 'x64', 'gpu'], labelMatch: LabelMatch.SUBSET }),
    pool({ name: 'gh-big', provider: Provider.GITHUB, labels: ['Linux', 'X64', 'big', 'ssd'], labelMatch: LabelMatch.SUBSET }),
    pool({ name: 'gl-docker', provider: Provider.GITLAB, labels: ['docker'], labelMatch: LabelMatch.EXACT }),
    pool({ name: 'gl-any', provider: Provider.GITLAB, labels: ['docker', 'linux'], labelMatch: LabelMatch.SUBSET, runUntagged: true }),
    pool({ name: 'gl-strict', provider: Provider.GITLAB, labels: ['arm64'], labelMatch: LabelMatch.SUBSET }),
  ],
});

describe('matchPool', () => {
  it.each([
    // [provider, job labels, expected pool or reason]
    [Provider.GITHUB, ['self-hosted', 'linux', 'x64'], 'gh-linux'], // exact beats subset pools
    [Provider.GITHUB, ['self-hosted', 'x64', 'linux'], 'gh-linux'], // order does not matter
    [Provider.GITHUB, ['Self-Hosted', 'LINUX', 'x64'], 'gh-linux'], // GitHub labels are case-insensitive
    [Provider.GITHUB, ['self-hosted', 'linux', 'x64', 'linux'], 'gh-linux'], // duplicates collapse
    [Provider.GITHUB, ['self-hosted', 'gpu'], 'gh-gpu'], // subset of gh-gpu only
    [Provider.GITHUB, ['self-hosted', 'linux'], 'gh-gpu'], // subset of gh-gpu (1 extra) and gh-big (3 extra): tightest wins
    [Provider.GITHUB, ['self-hosted', 'big'], 'gh-big'],
    [Provider.GITHUB, ['self-hosted'], 'gh-gpu'], // nothing asked beyond self-hosted: any subset pool, tightest first
    [Provider.GITHUB, ['linux', 'x64'], 'gh-linux'], // GitHub does not require "self-hosted"
    [Provider.GITHUB, ['gpu'], 'gh-gpu'],
    [Provider.GITHUB, ['windows'], 'not-self-hosted'], // fits no pool and did not ask for a self-hosted runner
    [Provider.GITHUB, ['ubuntu-latest'], 'not-self-hosted'],
    [Provider.GITHUB, [], 'not-self-hosted'],
    [Provider.GITHUB, ['self-hosted', 'linux', 'x64', 'windows'], 'no-matching-pool'], // asks for more than any pool offers
    [Provider.GITHUB, ['self-hosted', 'docker'], 'no-matching-pool'], // a GitLab pool's tag does not count
    [Provider.GITLAB, ['docker'], 'gl-docker'],
    [Provider.GITLAB, ['Docker'], 'no-matching-pool'], // GitLab tags compared as given
    [Provider.GITLAB, ['linux'], 'gl-any'],
    [Provider.GITLAB, ['docker', 'linux'], 'gl-any'],
    [Provider.GITLAB, [], 'gl-any'], // untagged: only pools that run untagged jobs
    [Provider.GITLAB, ['arm64'], 'gl-strict'],
    [Provider.GITLAB, ['arm64', 'docker'], 'no-matching-pool'],
    [Provider.GITLAB, ['self-hosted', 'docker'], 'no-matching-pool'], // "self-hosted" has no meaning on GitLab
  ] as const)('%s %j -> %s', (provider, labels, expected) => {
    const match = matchPool(config.pools, provider, labels);
    expect(match.pool?.name ?? (match as { reason: string }).reason).toBe(expected);
  });

  it('a pool with requireSelfHostedLabel takes only jobs that ask for "self-hosted"', () => {
    const strict = buildFleetConfig({
      github: { appId: '1', organization: 'acme' },
      pools: [
        pool({ name: 'strict', provider: Provider.GITHUB, labels: ['linux', 'x64'], requireSelfHostedLabel: true }),
        pool({ name: 'loose', provider: Provider.GITHUB, labels: ['linux', 'x64', 'big'], labelMatch: LabelMatch.SUBSET }),
      ],
    });
    expect(strict.pools.map((p) => p.requireSelfHostedLabel)).toEqual([true, undefined]);
    expect(matchPool(strict.pools, Provider.GITHUB, ['self-hosted', 'linux', 'x64']).pool?.name).toBe('strict');
    // Without the label the strict pool is out; the subset pool takes it.
    expect(matchPool(strict.pools, Provider.GITHUB, ['linux', 'x64']).pool?.name).toBe('loose');
    expect(matchPool(strict.pools.slice(0, 1), Provider.GITHUB, ['linux', 'x64'])).toEqual({ reason: 'not-self-hosted' });
  });

  it('breaks ties by configuration order', () => {
    const twin = buildFleetConfig({
      github: { appId: '1', organization: 'acme' },
      pools: [
        pool({ name: 'first', provider: Provider.GITHUB, labels: ['a'], labelMatch: LabelMatch.SUBSET }),
        pool({ name: 'second', provider: Provider.GITHUB, labels: ['a'], labelMatch: LabelMatch.EXACT }),
      ],
    });
    expect(matchPool(twin.pools, Provider.GITHUB, ['self-hosted', 'a']).pool?.name).toBe('first');
  });

  it('an exact pool refuses a job asking for fewer labels', () => {
    const only = buildFleetConfig({
      github: { appId: '1', organization: 'acme' },
      pools: [pool({ name: 'exact', provider: Provider.GITHUB, labels: ['a', 'b'], labelMatch: LabelMatch.EXACT })],
    });
    expect(matchPool(only.pools, Provider.GITHUB, ['self-hosted', 'a']).pool).toBeUndefined();
    expect(matchPool(only.pools, Provider.GITHUB, ['self-hosted', 'a', 'b']).pool?.name).toBe('exact');
  });

  it('an untagged GitLab job goes to a pool that runs untagged jobs under the default exact rule; a tagged job still needs its tags', () => {
    // The runner such a pool registers has tags and run_untagged: GitLab gives it untagged
    // jobs and jobs whose tags are among its own.
    const exact = buildFleetConfig({
      gitlab: { url: 'https://gitlab.example.com' },
      pools: [
        pool({ name: 'gl-docker', provider: Provider.GITLAB, labels: ['docker'] }),
        pool({ name: 'gl-general', provider: Provider.GITLAB, labels: ['linux', 'x64'], runUntagged: true }),
      ],
    });
    expect(exact.pools[1]!.labelMatch).toBe(LabelMatch.EXACT);
    expect(matchPool(exact.pools, Provider.GITLAB, []).pool?.name).toBe('gl-general');
    expect(matchPool(exact.pools, Provider.GITLAB, ['linux', 'x64']).pool?.name).toBe('gl-general');
    expect(matchPool(exact.pools, Provider.GITLAB, ['linux'])).toEqual({ reason: 'no-matching-pool' }); // exact: fewer tags refused
    expect(matchPool(exact.pools, Provider.GITLAB, ['docker']).pool?.name).toBe('gl-docker');
    expect(matchPool(exact.pools, Provider.GITLAB, ['gpu'])).toEqual({ reason: 'no-matching-pool' });
  });

  it('several pools run untagged jobs: the one with the fewest tags, then configuration order', () => {
    const many = buildFleetConfig({
      gitlab: { url: 'https://gitlab.example.com' },
      pools: [
        pool({ name: 'big', provider: Provider.GITLAB, labels: ['linux', 'big'], runUntagged: true }),
        pool({ name: 'small', provider: Provider.GITLAB, labels: ['linux'], runUntagged: true, labelMatch: LabelMatch.SUBSET }),
        pool({ name: 'small-too', provider: Provider.GITLAB, labels: ['arm64'], runUntagged: true }),
      ],
    });
    expect(matchPool(many.pools, Provider.GITLAB, []).pool?.name).toBe('small');
  });

  it('an untagged GitLab job never lands on a pool without runUntagged, even an exact one with no tags', () => {
    const only = buildFleetConfig({
      gitlab: { url: 'https://gitlab.example.com' },
      pools: [pool({ name: 'empty', provider: Provider.GITLAB, labels: [], labelMatch: LabelMatch.EXACT })],
    });
    expect(matchPool(only.pools, Provider.GITLAB, []).pool).toBeUndefined();
  });
});

describe('matchJobPool: a GitHub job matches the pools of its own organisation or repository only', () => {
  const orgs = buildFleetConfig({
    github: { appId: '1', organization: 'acme' },
    pools: [
      pool({ name: 'acme-linux', provider: Provider.GITHUB, labels: ['linux'] }),
      pool({ name: 'globex-linux', provider: Provider.GITHUB, labels: ['linux'], organization: 'Globex' }),
      pool({ name: 'initech-app', provider: Provider.GITHUB, labels: ['linux', 'big'], labelMatch: LabelMatch.SUBSET, repositories: ['initech/app'] }),
    ],
  });
  it.each([
    ['acme', 'app', ['self-hosted', 'linux'], 'acme-linux'],
    ['GLOBEX', 'web', ['self-hosted', 'linux'], 'globex-linux'], // logins are case-insensitive
    ['initech', 'app', ['self-hosted', 'linux'], 'initech-app'], // the only pool of that repository, by subset
    ['initech', 'other', ['self-hosted', 'linux'], 'no-matching-pool'], // no pool serves that repository
    ['umbrella', 'app', ['self-hosted', 'linux'], 'no-matching-pool'],
  ] as const)('%s/%s %j -> %s', (owner, project, labels, expected) => {
    const m = matchJobPool(orgs, Provider.GITHUB, owner, project, labels);
    expect(m.pool ? m.pool.name : m.reason).toBe(expected);
  });
  it('without the scope, the first pool of the same labels would take the other organisation\'s job', () => {
    expect(matchPool(orgs.pools, Provider.GITHUB, ['self-hosted', 'linux']).pool?.name).toBe('acme-linux');
  });
});

describe('matchPool and runner scale sets (docs/scale-set.md)', () => {
  const pool = (name: string, labels: string[], scaleSet?: string): PoolConfig =>
    ({ name, provider: Provider.GITHUB, labels, labelMatch: LabelMatch.SUBSET, runUntagged: false, ...(scaleSet ? { scaleSet: { name: scaleSet, runnerGroup: 'Default' } } : {}) }) as unknown as PoolConfig;
  const pools = [pool('fast', ['linux', 'fast'], 'Fast-Linux'), pool('plain', ['linux', 'fast-linux', 'x64'])];
  it.each<[string[], string]>([
    [['fast-linux'], 'scale-set'], // names the scale set (case-insensitive), though another pool carries the label
    [['self-hosted', 'FAST-LINUX'], 'scale-set'],
    [['fast-linux', 'linux'], 'scale-set'], // names it among other labels: GitHub assigns it nowhere, and no webhook runner either
  ])('%j gets no webhook runner: %s', (labels, reason) => {
    expect(matchPool(pools, Provider.GITHUB, labels)).toEqual({ reason });
  });
  it('a job of a pool that is no scale set is served as before', () => {
    expect(matchPool(pools, Provider.GITHUB, ['linux', 'x64']).pool?.name).toBe('plain');
  });
  it("a scale-set pool's labels take no job: GitHub assigns it only the jobs naming its scale set", () => {
    expect(matchPool(pools, Provider.GITHUB, ['linux', 'fast'])).toEqual({ reason: 'not-self-hosted' });
    expect(matchPool(pools, Provider.GITHUB, ['self-hosted', 'linux', 'fast'])).toEqual({ reason: 'no-matching-pool' });
  });
  // R2-2: webhook pool `hooks` [linux], scale-set pool `ss` [linux, x64] named `fast`.
  const hooksAndSs = [pool('ss', ['linux', 'x64'], 'fast'), pool('hooks', ['linux'])];
  it.each<[string[], string]>([
    [['self-hosted', 'linux'], 'hooks'],
    [['linux'], 'hooks'],
    [['self-hosted', 'linux', 'x64'], 'no-matching-pool'], // the best pool was ss: still not the scale set's at GitHub
    [['fast'], 'scale-set'],
    [['self-hosted', 'fast'], 'scale-set'],
  ])('hooks and ss: %j -> %s', (labels, want) => {
    const m = matchPool(hooksAndSs, Provider.GITHUB, labels);
    expect(m.pool ? m.pool.name : m.reason).toBe(want);
  });
});
