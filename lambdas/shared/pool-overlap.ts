import { githubPoolScope, gitLabScopeKey, isScaleSetPool, gitLabScopeOf, GitLabRunnerType, Provider, scopeServesRepository, type GitHubScopeFields, type GitLabConnectionConfig, type PoolConfig } from './contract';
import { offeredLabels } from './match-pool';

/**
 * Which pools compete for the same jobs under `matchPool`'s rules, for synth to refuse a pool
 * that can never get a job and to warn where the order of `pools` decides.
 *
 * A job (its labels J, as `matchPool` normalises them; GitHub: whether it asked for
 * "self-hosted") goes to the matching pool with the fewest labels it did not ask for, then the
 * first. For two pools that both match a job that count is |P| - |J|, so which of them wins
 * does not depend on the job: the pool with fewer labels, or of equal count the earlier one, is
 * *preferred*. The preferred pool W takes every job both match; the other pool L keeps the
 * jobs only it matches. Per label-match mode, L's labelled jobs are:
 * - exact: the one label set P_L;
 * - subset: every non-empty subset of P_L;
 * and besides them a *bare* job: GitHub's `runs-on: self-hosted` (no label left), matched by
 * a subset pool or an exact pool without labels; GitLab's untagged job, matched exactly by
 * the pools with `runUntagged` (whatever their tags and mode). A GitHub pool with
 * `requireSelfHostedLabel` matches only jobs that ask for "self-hosted".
 *
 * Verdicts for a pair (W preferred over L, same provider and scope):
 * - `starved` (refused): W matches every job L matches, so L never gets one.
 * - `order` (warning): both match some labelled job (a GitLab untagged job counts too) and
 *   they have as many labels each: the order of `pools` alone sends it to W. (W covering L's
 *   labelled jobs needs as many labels as L, so "L gets only bare jobs" is one of these.)
 * Two pools with overlapping jobs and fewer labels on W are how tiers are written (a narrow
 * pool beside a broad one): no verdict. GitHub's bare job alone (every subset pool matches
 * `runs-on: self-hosted`) is no reason to warn. Several pools that together cover one are
 * not found. test/webhook/pool-overlap.test.ts checks these verdicts against `matchPool` on
 * every pair of pools over three labels.
 */
export type OverlapKind = 'starved' | 'order';

export interface PoolOverlap {
  readonly kind: OverlapKind;
  /** Index in `pools` of the pool that wins the shared jobs. */
  readonly winner: number;
  /** Index in `pools` of the pool that loses them. */
  readonly loser: number;
  /** Labels of a job both match (normalised); empty for a bare job. */
  readonly example: readonly string[];
  /** Why the winner wins: it has fewer labels, or as many and comes first. */
  readonly because: 'fewer-labels' | 'first';
}

/**
 * How two pools' scopes relate, for `poolOverlaps`: whether they can see one job at all
 * (`meet`), and whether every job `inner`'s scope can see `outer`'s can too (`within`). A pool
 * is starved only when its scope lies within the winner's: a pool of `acme/app` and
 * `other/tool` keeps the other/tool jobs beside a pool of the organisation acme.
 */
export interface JobScopes {
  meet(a: PoolConfig, b: PoolConfig): boolean;
  within(inner: PoolConfig, outer: PoolConfig): boolean;
}

/** One scope for every pool: every pair meets, each lies within the other. */
const ONE_SCOPE: JobScopes = { meet: () => true, within: () => true };

/**
 * The scopes of a fleet's pools: GitHub pools by their organisations or repositories
 * (github-scope.ts); GitLab pools by their group or project (gitlab-scope.ts): project pools of
 * two projects never meet, groups can nest, so theirs can; one scope lies within another when it
 * is the same or the other is the instance.
 */
export function jobScopes(config: { readonly github?: GitHubScopeFields; readonly gitlab?: GitLabConnectionConfig }): JobScopes {
  const owner = (repo: string) => repo.split('/')[0]!;
  const name = (repo: string) => repo.split('/')[1] ?? '';
  const github = (a: PoolConfig) => githubPoolScope(config.github!, a);
  const gitlab = (a: PoolConfig) => gitLabScopeOf(config.gitlab!, a);
  return {
    meet: (a, b) => {
      if (a.provider === Provider.GITLAB && config.gitlab !== undefined) {
        const [x, y] = [gitlab(a), gitlab(b)];
        return !(x.runnerType === GitLabRunnerType.PROJECT && y.runnerType === GitLabRunnerType.PROJECT && x.scopeId !== y.scopeId);
      }
      if (a.provider !== Provider.GITHUB || config.github === undefined) return true;
      const [x, y] = [github(a), github(b)];
      if (x.organization !== undefined && y.organization !== undefined) return x.organization.toLowerCase() === y.organization.toLowerCase();
      if (x.organization !== undefined) return y.repositories.some((r) => scopeServesRepository(x, owner(r), name(r)));
      return x.repositories.some((r) => scopeServesRepository(y, owner(r), name(r)));
    },
    within: (inner, outer) => {
      if (inner.provider === Provider.GITLAB && config.gitlab !== undefined) {
        const [x, y] = [gitlab(inner), gitlab(outer)];
        return y.runnerType === GitLabRunnerType.INSTANCE || gitLabScopeKey(x) === gitLabScopeKey(y);
      }
      if (inner.provider !== Provider.GITHUB || config.github === undefined) return true;
      const [x, y] = [github(inner), github(outer)];
      if (x.organization !== undefined) return y.organization !== undefined && y.organization.toLowerCase() === x.organization.toLowerCase();
      return x.repositories.every((r) => scopeServesRepository(y, owner(r), name(r)));
    },
  };
}

interface Shape {
  readonly labels: ReadonlySet<string>;
  readonly subset: boolean;
  /** Matches the bare job (GitHub: `runs-on: self-hosted` alone; GitLab: untagged). */
  readonly bare: boolean;
  /** GitHub: matches jobs that do not ask for "self-hosted" too. */
  readonly withoutSelfHosted: boolean;
}

function shapeOf(pool: PoolConfig): Shape {
  const labels = offeredLabels(pool);
  const subset = pool.labelMatch === 'subset';
  const github = pool.provider === 'github';
  return {
    labels,
    subset,
    bare: github ? subset || labels.size === 0 : pool.runUntagged,
    withoutSelfHosted: github && !pool.requireSelfHostedLabel,
  };
}

const within = (a: ReadonlySet<string>, b: ReadonlySet<string>) => [...a].every((l) => b.has(l));
const same = (a: ReadonlySet<string>, b: ReadonlySet<string>) => a.size === b.size && within(a, b);

/** A non-empty label set both pools match, if any (by the modes above). */
function sharedLabelledJob(w: Shape, l: Shape): string[] | undefined {
  const shared = (set: ReadonlySet<string>) => (set.size > 0 ? [...set].sort() : undefined);
  if (!w.subset && !l.subset) return same(w.labels, l.labels) ? shared(w.labels) : undefined;
  if (!w.subset) return within(w.labels, l.labels) ? shared(w.labels) : undefined;
  if (!l.subset) return within(l.labels, w.labels) ? shared(l.labels) : undefined;
  return shared(new Set([...w.labels].filter((x) => l.labels.has(x))));
}

/** Whether `w` matches every labelled job `l` matches. */
function coversLabelled(w: Shape, l: Shape): boolean {
  if (l.labels.size === 0) return true; // l matches no labelled job
  if (l.withoutSelfHosted && !w.withoutSelfHosted) return false;
  if (!l.subset) return w.subset ? within(l.labels, w.labels) : same(w.labels, l.labels);
  // Every non-empty subset of l's labels: an exact pool matches only one of them.
  return w.subset ? within(l.labels, w.labels) : l.labels.size === 1 && same(w.labels, l.labels);
}

/** The verdict for `w` preferred over `l` (both of one provider and scope), if any. */
function verdict(w: Shape, l: Shape, github: boolean): { kind: OverlapKind; example: string[] } | undefined {
  const labelled = coversLabelled(w, l);
  const bare = !l.bare || w.bare;
  const hasJobs = l.labels.size > 0 || l.bare;
  if (labelled && bare && hasJobs) return { kind: 'starved', example: sharedLabelledJob(w, l) ?? [] };
  if (w.labels.size !== l.labels.size) return undefined;
  const example = sharedLabelledJob(w, l) ?? (!github && w.bare && l.bare ? [] : undefined);
  return example ? { kind: 'order', example } : undefined;
}

/**
 * Whether one job can match both pools (same provider and scope): a labelled job both match, or
 * the bare job both take (GitHub's `runs-on: self-hosted`, GitLab's untagged job).
 */
export function canMatchOneJob(a: PoolConfig, b: PoolConfig): boolean {
  const [x, y] = [shapeOf(a), shapeOf(b)];
  return sharedLabelledJob(x, y) !== undefined || (x.bare && y.bare);
}

/**
 * Every pair of pools that compete as above, the preferred one first. A pool whose scope does
 * not lie within the winner's keeps the jobs only its scope sees: `order`, not `starved`.
 */
export function poolOverlaps(pools: readonly PoolConfig[], scopes: JobScopes = ONE_SCOPE): PoolOverlap[] {
  const shapes = pools.map(shapeOf);
  const out: PoolOverlap[] = [];
  for (let a = 0; a < pools.length; a++) {
    for (let b = a + 1; b < pools.length; b++) {
      if (pools[a]!.provider !== pools[b]!.provider || !scopes.meet(pools[a]!, pools[b]!)) continue;
      // A scale set gets the jobs naming it from GitHub, never through matchPool: it competes with no pool.
      if (isScaleSetPool(pools[a]!) || isScaleSetPool(pools[b]!)) continue;
      // Fewer labels wins; as many, the earlier (a).
      const [w, l] = shapes[b]!.labels.size < shapes[a]!.labels.size ? [b, a] : [a, b];
      const found = verdict(shapes[w]!, shapes[l]!, pools[a]!.provider === 'github');
      if (found?.kind === 'starved' && !scopes.within(pools[l]!, pools[w]!)) found.kind = 'order';
      if (found) out.push({ ...found, winner: w, loser: l, because: shapes[w]!.labels.size < shapes[l]!.labels.size ? 'fewer-labels' : 'first' });
    }
  }
  return out;
}
