import { githubPoolScope, isScaleSetPool, scopeServesRepository, type GitHubConnectionConfig, type PoolConfig, type Provider } from './contract';

/** The label every GitHub self-hosted runner carries; a job may ask for it, GitHub does not require it. */
export const GITHUB_SELF_HOSTED_LABEL = 'self-hosted';

export type PoolMatch =
  | { readonly pool: PoolConfig }
  | { readonly pool?: undefined; readonly reason: 'not-self-hosted' | 'no-matching-pool' | 'scale-set' };

/**
 * Whether the matched pool is paused (`maxRunners` 0): the reconciler leaves its jobs queued at
 * the CI service instead of queuing copies that could only wait out their maximum wait and be
 * dead-lettered; once the pool resumes it finds them again (docs/operations.md, "Pause a pool").
 */
export function pausedPool(match: PoolMatch): boolean {
  return match.pool !== undefined && match.pool.maxRunners === 0;
}

/**
 * Chooses the pool whose runners can take a job, from the labels (GitHub) or tags (GitLab)
 * the job asks for. The webhook calls it for every job; scale-up calls it for GitLab jobs
 * whose tags were resolved later.
 *
 * Rules (the job's labels J, a pool's labels P, both as sets):
 * - GitHub: "self-hosted" is removed from J and P (every self-hosted runner has it, and GitHub
 *   routes `runs-on: [linux, x64]` to a self-hosted runner labelled so without it). A pool
 *   with `requireSelfHostedLabel` only takes jobs that ask for it. GitHub compares labels
 *   case-insensitively, so both sides are lower-cased. GitLab tags are compared as given.
 * - `exact`: J equals P.
 * - `subset`: J is a subset of P, which is how both services route a job to a runner (a runner
 *   takes a job when it has every label the job asks for).
 * - A GitHub job with no labels left (`[self-hosted]`) matches only pools whose rule admits it
 *   as above; a GitHub job with no labels at all matches nothing.
 * - An untagged GitLab job matches exactly the pools with `runUntagged`, whatever their tags
 *   and rule: a runner with `run_untagged` picks untagged jobs besides the jobs its tags allow
 *   (GitLab docs, "Use tags to control which jobs a runner can run"), and one without never does.
 * - Several candidates: an exact match wins over a subset match, then the subset pool with the
 *   fewest labels the job did not ask for, then the first in configuration order.
 * - Runner scale sets (docs/scale-set.md): GitHub assigns a scale set's jobs to it, and its
 *   listener starts their runners. The fleet's scale set carries its name as its only label,
 *   so GitHub assigns it only jobs that name it: such a job gets no runner here (`scale-set`),
 *   or one job would get two runners. A scale-set pool is never a candidate otherwise: a job
 *   that does not name its scale set is not GitHub's to assign to it, so its labels must not
 *   keep the job from a webhook pool that fits it.
 */
export function matchPool(pools: readonly PoolConfig[], provider: Provider, jobLabels: readonly string[]): PoolMatch {
  const normalise = labelNormaliser(provider);
  const asked = new Set(jobLabels.map(normalise).filter((l) => l !== ''));
  const github = provider === 'github';
  const askedSelfHosted = github && asked.delete(GITHUB_SELF_HOSTED_LABEL);
  if (github && asked.size === 0 && !askedSelfHosted) return { reason: 'not-self-hosted' };
  if (github && pools.some((p) => isScaleSetPool(p) && asked.has(normalise(p.scaleSet!.name)))) return { reason: 'scale-set' };
  const untagged = !github && asked.size === 0;
  let best: { pool: PoolConfig; extra: number } | undefined;
  for (const pool of pools) {
    if (pool.provider !== provider || isScaleSetPool(pool)) continue;
    if (github && pool.requireSelfHostedLabel && !askedSelfHosted) continue;
    const offered = offeredLabels(pool);
    const extra = offered.size - asked.size;
    if (untagged) {
      if (!pool.runUntagged) continue;
    } else {
      if (![...asked].every((l) => offered.has(l))) continue;
      if (pool.labelMatch === 'exact' && extra !== 0) continue;
    }
    if (!best || extra < best.extra) best = { pool, extra };
  }
  if (best) return { pool: best.pool };
  // A job that did not ask for "self-hosted" and fits no pool is most likely for GitHub's own runners.
  return { reason: github && !askedSelfHosted ? 'not-self-hosted' : 'no-matching-pool' };
}

/** How the provider compares labels: GitHub case-insensitively, GitLab as given; both trimmed. */
export function labelNormaliser(provider: Provider): (label: string) => string {
  return provider === 'github' ? (l: string) => l.trim().toLowerCase() : (l: string) => l.trim();
}

/** The labels a pool's runners offer as `matchPool` compares them (GitHub: "self-hosted" aside). */
export function offeredLabels(pool: PoolConfig): Set<string> {
  const offered = new Set(pool.labels.map(labelNormaliser(pool.provider)));
  if (pool.provider === 'github') offered.delete(GITHUB_SELF_HOSTED_LABEL);
  return offered;
}

/**
 * `matchPool` over the pools that may take a job of `owner/project`: a GitHub job only over the
 * GitHub pools whose organisation or repositories hold it (github-scope.ts), so two pools with
 * the same labels in two organisations each take their own organisation's jobs. GitLab jobs
 * see every pool.
 */
export function matchJobPool(config: { readonly github?: GitHubConnectionConfig; readonly pools: readonly PoolConfig[] }, provider: Provider, owner: string, project: string, jobLabels: readonly string[]): PoolMatch {
  return matchPool(poolsServing(config, provider, owner, project), provider, jobLabels);
}

/** The pools whose scope holds `owner/project` (GitHub); every pool of the provider otherwise. */
export function poolsServing(config: { readonly github?: GitHubConnectionConfig; readonly pools: readonly PoolConfig[] }, provider: Provider, owner: string, project: string): PoolConfig[] {
  const github = config.github;
  if (provider !== 'github' || github === undefined) return config.pools.filter((p) => p.provider === provider);
  return config.pools.filter((p) => p.provider === 'github' && scopeServesRepository(githubPoolScope(github, p), owner, project));
}
