import { describe, expect, it } from 'vitest';
import { buildFleetConfig, type PoolInput } from '../../lambdas/shared/contract';
import { matchPool } from '../../lambdas/shared/match-pool';

const base = { launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
const pool = (p: Partial<PoolInput> & Pick<PoolInput, 'name' | 'provider'>): PoolInput => ({ ...base, ...p });

const config = buildFleetConfig({
  github: { appId: '1', organization: 'acme' },
  gitlab: { url: 'https://gitlab.example.com' },
  pools: [
    pool({ name: 'gh-linux', provider: 'github', labels: ['linux', 'x64'], labelMatch: 'exact' }),
    pool({ name: 'gh-gpu', provider: 'github', labels: ['linux', 'x64', 'gpu'], labelMatch: 'subset' }),
    pool({ name: 'gh-big', provider: 'github', labels: ['Linux', 'X64', 'big', 'ssd'], labelMatch: 'subset' }),
    pool({ name: 'gl-docker', provider: 'gitlab', labels: ['docker'], labelMatch: 'exact' }),
    pool({ name: 'gl-any', provider: 'gitlab', labels: ['docker', 'linux'], labelMatch: 'subset', runUntagged: true }),
    pool({ name: 'gl-strict', provider: 'gitlab', labels: ['arm64'], labelMatch: 'subset' }),
  ],
});

describe('matchPool', () => {
  it.each([
    // [provider, job labels, expected pool or reason]
    ['github', ['self-hosted', 'linux', 'x64'], 'gh-linux'], // exact beats subset pools
    ['github', ['self-hosted', 'x64', 'linux'], 'gh-linux'], // order does not matter
    ['github', ['Self-Hosted', 'LINUX', 'x64'], 'gh-linux'], // GitHub labels are case-insensitive
    ['github', ['self-hosted', 'linux', 'x64', 'linux'], 'gh-linux'], // duplicates collapse
    ['github', ['self-hosted', 'gpu'], 'gh-gpu'], // subset of gh-gpu only
    ['github', ['self-hosted', 'linux'], 'gh-gpu'], // subset of gh-gpu (1 extra) and gh-big (3 extra): tightest wins
    ['github', ['self-hosted', 'big'], 'gh-big'],
    ['github', ['self-hosted'], 'gh-gpu'], // nothing asked beyond self-hosted: any subset pool, tightest first
    ['github', ['linux', 'x64'], 'not-self-hosted'], // GitHub-hosted or another runner type
    ['github', ['ubuntu-latest'], 'not-self-hosted'],
    ['github', [], 'not-self-hosted'],
    ['github', ['self-hosted', 'linux', 'x64', 'windows'], 'no-matching-pool'], // asks for more than any pool offers
    ['github', ['self-hosted', 'docker'], 'no-matching-pool'], // a GitLab pool's tag does not count
    ['gitlab', ['docker'], 'gl-docker'],
    ['gitlab', ['Docker'], 'no-matching-pool'], // GitLab tags compared as given
    ['gitlab', ['linux'], 'gl-any'],
    ['gitlab', ['docker', 'linux'], 'gl-any'],
    ['gitlab', [], 'gl-any'], // untagged: only pools that run untagged jobs
    ['gitlab', ['arm64'], 'gl-strict'],
    ['gitlab', ['arm64', 'docker'], 'no-matching-pool'],
    ['gitlab', ['self-hosted', 'docker'], 'no-matching-pool'], // "self-hosted" has no meaning on GitLab
  ] as const)('%s %j -> %s', (provider, labels, expected) => {
    const match = matchPool(config.pools, provider, labels);
    expect(match.pool?.name ?? (match as { reason: string }).reason).toBe(expected);
  });

  it('breaks ties by configuration order', () => {
    const twin = buildFleetConfig({
      github: { appId: '1', organization: 'acme' },
      pools: [
        pool({ name: 'first', provider: 'github', labels: ['a'], labelMatch: 'subset' }),
        pool({ name: 'second', provider: 'github', labels: ['a'], labelMatch: 'exact' }),
      ],
    });
    expect(matchPool(twin.pools, 'github', ['self-hosted', 'a']).pool?.name).toBe('first');
  });

  it('an exact pool refuses a job asking for fewer labels', () => {
    const only = buildFleetConfig({
      github: { appId: '1', organization: 'acme' },
      pools: [pool({ name: 'exact', provider: 'github', labels: ['a', 'b'], labelMatch: 'exact' })],
    });
    expect(matchPool(only.pools, 'github', ['self-hosted', 'a']).pool).toBeUndefined();
    expect(matchPool(only.pools, 'github', ['self-hosted', 'a', 'b']).pool?.name).toBe('exact');
  });

  it('an untagged GitLab job never lands on a pool without runUntagged, even an exact one with no tags', () => {
    const only = buildFleetConfig({
      gitlab: { url: 'https://gitlab.example.com' },
      pools: [pool({ name: 'empty', provider: 'gitlab', labels: [], labelMatch: 'exact' })],
    });
    expect(matchPool(only.pools, 'gitlab', []).pool).toBeUndefined();
  });
});
