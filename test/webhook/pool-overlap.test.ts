import { describe, expect, it } from 'vitest';
import { buildFleetConfig, LabelMatch, Provider, type PoolConfig, type PoolInput } from '../../lambdas/shared/contract';
import { matchPool } from '../../lambdas/shared/match-pool';
import { poolOverlaps, type PoolOverlap } from '../../lambdas/shared/pool-overlap';

const base = { launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
type Spec = Partial<PoolInput> & Pick<PoolInput, 'provider'>;
function pools(...specs: Spec[]): PoolConfig[] {
  return buildFleetConfig({
    github: { appId: '1', organization: 'acme' },
    gitlab: { url: 'https://gitlab.example.com' },
    pools: specs.map((s, i) => ({ ...base, name: `p${i}`, ...s })),
  }).pools;
}
const gh = (labels: string[], labelMatch = LabelMatch.EXACT, extra: Partial<PoolInput> = {}): Spec => ({ provider: Provider.GITHUB, labels, labelMatch, ...extra });
const gl = (labels: string[], labelMatch = LabelMatch.EXACT, extra: Partial<PoolInput> = {}): Spec => ({ provider: Provider.GITLAB, labels, labelMatch, ...extra });
const brief = (o: PoolOverlap[]) => o.map((x) => [x.kind, x.winner, x.loser, x.example, x.because]);

describe('poolOverlaps: per label-match mode', () => {
  it.each<[string, Spec[], unknown[]]>([
    ['exact, exact, the same labels: the second never gets a job', [gh(['linux', 'x64']), gh(['x64', 'linux'])], [['starved', 0, 1, ['linux', 'x64'], 'first']]],
    ['GitHub compares case-insensitively and without "self-hosted"', [gh(['Linux']), gh(['self-hosted', 'linux'])], [['starved', 0, 1, ['linux'], 'first']]],
    ['GitLab compares tags as given', [gl(['Linux']), gl(['linux'])], []],
    ['exact, exact, other labels: no overlap', [gh(['linux']), gh(['linux', 'x64'])], []],
    ['a scale-set pool beside a pool of the same labels: no overlap (GitHub hands the scale set the jobs naming it)', [gh(['linux']), gh(['linux'], LabelMatch.EXACT, { scaleSetName: 'fast' })], []],
    ['a pool of the same labels after a scale-set pool still gets its jobs', [gh(['linux'], LabelMatch.EXACT, { scaleSetName: 'fast' }), gh(['linux'])], []],
    ['subset, then exact of the same labels: the exact pool never gets a job', [gh(['linux', 'x64'], LabelMatch.SUBSET), gh(['linux', 'x64'])], [['starved', 0, 1, ['linux', 'x64'], 'first']]],
    ['exact, then subset of the same labels: the order decides the full set; the subset pool keeps the rest', [gh(['linux', 'x64']), gh(['linux', 'x64'], LabelMatch.SUBSET)], [['order', 0, 1, ['linux', 'x64'], 'first']]],
    ['subset, subset, the same labels: the second never gets a job', [gh(['a', 'b'], LabelMatch.SUBSET), gh(['b', 'a'], LabelMatch.SUBSET)], [['starved', 0, 1, ['a', 'b'], 'first']]],
    ['subset inside a larger subset: the narrow pool wins what both match, by specificity, and the broad one keeps the rest', [gh(['a', 'b', 'c'], LabelMatch.SUBSET), gh(['a'], LabelMatch.SUBSET)], []],
    ['a broad subset pool listed first: the narrower one still wins what both match (specificity, not order)', [gh(['a', 'b', 'c'], LabelMatch.SUBSET), gh(['a', 'b'], LabelMatch.SUBSET)], []],
    ['subset, subset, as many labels, sharing some: the order decides the shared jobs', [gh(['linux', 'x64'], LabelMatch.SUBSET), gh(['linux', 'arm64'], LabelMatch.SUBSET)], [['order', 0, 1, ['linux'], 'first']]],
    ['exact with fewer labels inside a subset pool: it wins its set by specificity', [gh(['a', 'b'], LabelMatch.SUBSET), gh(['a'])], []],
    [
      'GitHub: a one-label subset pool behind an exact pool of that label gets only `runs-on: self-hosted` jobs',
      [gh(['linux']), gh(['linux'], LabelMatch.SUBSET)],
      [['order', 0, 1, ['linux'], 'first']],
    ],
    ['GitLab: the same, without runUntagged: the subset pool never gets a job', [gl(['docker']), gl(['docker'], LabelMatch.SUBSET)], [['starved', 0, 1, ['docker'], 'first']]],
    ['GitLab: with runUntagged on the subset pool it keeps the untagged jobs', [gl(['docker']), gl(['docker'], LabelMatch.SUBSET, { runUntagged: true })], [['order', 0, 1, ['docker'], 'first']]],
    ['GitLab: a subset pool inside a broader one, the broad pool with runUntagged: the narrow one wins what both match', [gl(['a', 'b'], LabelMatch.SUBSET, { runUntagged: true }), gl(['a'], LabelMatch.SUBSET)], []],
    ['GitLab: two runUntagged pools of as many tags: the order decides the untagged jobs', [gl(['a'], LabelMatch.EXACT, { runUntagged: true }), gl(['b'], LabelMatch.EXACT, { runUntagged: true })], [['order', 0, 1, [], 'first']]],
    ['GitLab: a runUntagged exact pool behind a subset pool of its tags keeps only the untagged jobs: the order decides its tagged one', [gl(['a', 'b'], LabelMatch.SUBSET), gl(['a', 'b'], LabelMatch.EXACT, { runUntagged: true })], [['order', 0, 1, ['a', 'b'], 'first']]],
    // p2 loses [a] to p0 (fewer tags) and [a, b] to p1 (first), and keeps [b].
    ['three pools: each pair judged on its own', [gl(['a'], LabelMatch.SUBSET), gl(['a', 'b'], LabelMatch.EXACT), gl(['a', 'b'], LabelMatch.SUBSET)], [['order', 1, 2, ['a', 'b'], 'first']]],
    ['GitHub: requireSelfHostedLabel on the first pool leaves the second the jobs that do not ask for it', [gh(['linux'], LabelMatch.EXACT, { requireSelfHostedLabel: true }), gh(['linux'])], [['order', 0, 1, ['linux'], 'first']]],
    ['GitHub: requireSelfHostedLabel on the second pool: the first takes all it could', [gh(['linux']), gh(['linux'], LabelMatch.EXACT, { requireSelfHostedLabel: true })], [['starved', 0, 1, ['linux'], 'first']]],
    ['a GitHub and a GitLab pool never compete', [gh(['linux']), gl(['linux'])], []],
    ['the winner with fewer labels listed second', [gh(['a', 'b'], LabelMatch.SUBSET), gh(['a', 'b', 'c'], LabelMatch.SUBSET), gh(['a'])], []],
  ])('%s', (_name, specs, expected) => {
    expect(brief(poolOverlaps(pools(...specs)))).toEqual(expected);
  });
});

/**
 * The verdicts against `matchPool` itself: for every pair of pools over a three-label
 * universe, in every mode (exact/subset, requireSelfHostedLabel, runUntagged), every job is
 * routed and what happened is compared with what poolOverlaps said.
 */
describe('poolOverlaps agrees with matchPool on every pair of small pools', () => {
  const universe = ['a', 'b', 'c'];
  const subsets = (xs: string[]): string[][] => xs.reduce<string[][]>((acc, x) => [...acc, ...acc.map((s) => [...s, x])], [[]]);
  const labelSets = subsets(universe);
  for (const provider of [Provider.GITHUB, Provider.GITLAB]) {
    it(provider, () => {
      const github = provider === Provider.GITHUB;
      const variants: Spec[] = [];
      for (const labels of labelSets)
        for (const labelMatch of [LabelMatch.EXACT, LabelMatch.SUBSET])
          for (const flag of [false, true]) variants.push({ provider, labels, labelMatch, ...(github ? { requireSelfHostedLabel: flag } : { runUntagged: flag }) });
      // Every job a pool can be asked: each label set, on GitHub with and without "self-hosted".
      const jobs = labelSets.flatMap((j) => (github ? [['self-hosted', ...j], j] : [j]));
      let checked = 0;
      for (const first of variants) {
        for (const second of variants) {
          const config = pools(first, second);
          const alone = (i: number, job: string[]) => matchPool([config[i]!], provider, job).pool !== undefined;
          const wins = (i: number, job: string[]) => matchPool(config, provider, job).pool?.name === config[i]!.name;
          const bare = (job: string[]) => job.filter((l) => l !== 'self-hosted').length === 0;
          const sizes = config.map((p) => new Set(p.labels).size);
          const expected: string[] = [];
          for (const l of [0, 1]) {
            const w = 1 - l;
            const preferred = sizes[w]! < sizes[l]! || (sizes[w] === sizes[l] && w < l);
            if (!preferred) continue;
            const matched = jobs.filter((j) => alone(l, j));
            const won = matched.filter((j) => wins(l, j));
            if (matched.length > 0 && won.length === 0) expected.push(`starved ${w}>${l}`);
            else if (sizes[w] === sizes[l] && jobs.some((j) => alone(w, j) && alone(l, j) && !(github && bare(j)))) expected.push(`order ${w}>${l}`);
          }
          const got = poolOverlaps(config).map((o) => `${o.kind} ${o.winner}>${o.loser}`);
          expect(got, JSON.stringify([first, second])).toEqual(expected);
          checked++;
        }
      }
      expect(checked).toBe(variants.length ** 2);
    });
  }
});
