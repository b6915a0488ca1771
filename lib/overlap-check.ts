import { gitLabScopeKey, gitLabScopeOf, GitLabRunnerType, scheduleOverlaps, type FleetConfig, type GitLabConnectionConfig, type PoolConfig } from '../lambdas/shared/contract';
import { canMatchOneJob, jobScopes, poolOverlaps, type PoolOverlap } from '../lambdas/shared/pool-overlap';

/**
 * Settings that compete where only one can win: two pools for one job (`matchPool`'s rules,
 * lambdas/shared/pool-overlap.ts) and two windows of one warm schedule (the first matching
 * window wins). Where one side can never win it is refused; where the order of the list decides
 * and that can be intended, a warning names both sides and says which wins.
 */

const count = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
const poolAt = (pools: readonly PoolConfig[], i: number) => `pools[${i}] (pool "${pools[i]!.name}")`;

function labelsOf(pool: PoolConfig): string {
  const word = pool.provider === 'gitlab' ? 'tags' : 'labels';
  return `${word} [${pool.labels.join(', ')}] (labelMatch ${pool.labelMatch}${pool.requireSelfHostedLabel ? ', requireSelfHostedLabel' : ''}${pool.runUntagged ? ', runUntagged' : ''})`;
}

function why(pools: readonly PoolConfig[], o: PoolOverlap): string {
  const w = pools[o.winner]!;
  return o.because === 'first'
    ? `it comes first in pools (both have ${count(new Set(w.labels).size, w.provider === 'gitlab' ? 'tag' : 'label')}, so the order decides)`
    : 'it has fewer labels the job did not ask for (a job goes to the matching pool with the fewest)';
}

function jobOf(pool: PoolConfig, example: readonly string[]): string {
  if (example.length > 0) return `a job asking for [${example.join(', ')}]`;
  return pool.provider === 'gitlab' ? 'an untagged job' : 'a job asking only for "self-hosted"';
}

/** The refusals: a pool that never gets a job, a schedule window that never applies. */
export function overlapRefusals(config: FleetConfig): string[] {
  const pools = config.pools;
  const out = poolOverlaps(pools, jobScopes(config))
    .filter((o) => o.kind === 'starved')
    .map(
      (o) =>
        `${poolAt(pools, o.loser)} can never get a job: every job it matches also matches ${poolAt(pools, o.winner)}, which takes it because ${why(pools, o)}. ` +
        `${poolAt(pools, o.loser)} has ${labelsOf(pools[o.loser]!)}, ${poolAt(pools, o.winner)} ${labelsOf(pools[o.winner]!)}. ` +
        `Give one of them other labels (or another labelMatch), or remove pools[${o.loser}].`,
    );
  if (config.gitlab !== undefined) out.push(...gitLabScopeClashes(config.gitlab, pools));
  pools.forEach((pool, i) => {
    for (const s of scheduleOverlaps(pool.warm.schedule).filter((x) => x.kind === 'shadowed')) {
      const entry = pool.warm.schedule[s.later]!;
      out.push(
        `pools[${i}].warm.schedule[${s.later}] (pool "${pool.name}") "${entry.window}" never applies: every minute of it lies in ` +
          `${s.earlier.map((e) => `warm.schedule[${e}] ("${pool.warm.schedule[e]!.window}")`).join(' and ')}, which come${s.earlier.length > 1 ? '' : 's'} first, and the first matching window wins. ` +
          'Remove it, or put it before the broader window to make it the exception.',
      );
    }
  });
  return out;
}

/** The warnings: two pools or two windows where the order of the list decides. */
export function overlapWarnings(config: FleetConfig): { id: string; message: string }[] {
  const pools = config.pools;
  const out = poolOverlaps(pools, jobScopes(config))
    .filter((o) => o.kind === 'order')
    .map((o) => ({
      id: 'cdk-warm-runners:pool-overlap',
      message:
        `${poolAt(pools, o.winner)} and ${poolAt(pools, o.loser)} both match ${jobOf(pools[o.winner]!, o.example)}: it goes to pools[${o.winner}], because ${why(pools, o)}. ` +
        `pools[${o.loser}] gets only the jobs pools[${o.winner}] does not match. If that is not intended, put the pool meant for such jobs first, or give the two pools labels that do not overlap.`,
    }));
  pools.forEach((pool, i) => {
    for (const s of scheduleOverlaps(pool.warm.schedule).filter((x) => x.kind === 'overlap')) {
      const [a, b] = [pool.warm.schedule[s.earlier[0]!]!, pool.warm.schedule[s.later]!];
      out.push({
        id: 'cdk-warm-runners:schedule-overlap',
        message:
          `pools[${i}].warm.schedule[${s.earlier[0]}] ("${a.window}", size ${a.size}) and warm.schedule[${s.later}] ("${b.window}", size ${b.size}) of pool "${pool.name}" overlap: ` +
          `where both apply the warm size is ${a.size}, the earlier window's (the first matching window wins). If the other should win there, put it first.`,
      });
    }
  });
  return out;
}

/** The prop that puts a GitLab pool in its scope, as the user wrote it: `gitlabGroupId 40`, `gitlab.scopeId 12`. */
function gitLabScopeProp(gitlab: GitLabConnectionConfig, pool: PoolConfig): string {
  if (pool.gitlabProjectId !== undefined) return `gitlabProjectId ${pool.gitlabProjectId}`;
  if (pool.gitlabGroupId !== undefined) return `gitlabGroupId ${pool.gitlabGroupId}`;
  return gitlab.runnerType === GitLabRunnerType.INSTANCE ? 'gitlab.runnerType instance' : `gitlab.scopeId ${gitlab.scopeId ?? '?'}`;
}

/**
 * Two GitLab pools of different scopes that can match one job (`canMatchOneJob`): a Job Hook
 * names the job's project but not its groups, so the webhook cannot tell which group's pool may
 * take it (docs/gitlab.md, "Several groups or projects"). Pools of two projects never clash (a
 * job has one project). Named at `runUntagged` when both take untagged jobs, else at `labels`.
 */
function gitLabScopeClashes(gitlab: GitLabConnectionConfig, pools: readonly PoolConfig[]): string[] {
  const out: string[] = [];
  pools.forEach((a, i) => {
    pools.forEach((b, j) => {
      if (j <= i || a.provider !== 'gitlab' || b.provider !== 'gitlab') return;
      const [sa, sb] = [gitLabScopeOf(gitlab, a), gitLabScopeOf(gitlab, b)];
      if (gitLabScopeKey(sa) === gitLabScopeKey(sb)) return;
      if (sa.runnerType === GitLabRunnerType.PROJECT && sb.runnerType === GitLabRunnerType.PROJECT) return;
      if (!canMatchOneJob(a, b)) return;
      const prop = a.runUntagged && b.runUntagged ? 'runUntagged' : 'labels';
      out.push(
        `pools[${j}].${prop} (pool "${b.name}", ${gitLabScopeProp(gitlab, b)}) and pools[${i}].${prop} (pool "${a.name}", ${gitLabScopeProp(gitlab, a)}) can match the same GitLab job, but register in different scopes: ` +
          "a Job Hook does not say which group a project belongs to, so a job could be given to the pool whose runners cannot take it; give each scope's pools tags of their own",
      );
    });
  });
  return out;
}
