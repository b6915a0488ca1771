import { GetParameterCommand, PutParameterCommand, type GetParameterCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { errorName, isUnknownOutcome, READ, UnknownOutcomeError, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import {
  daysUntilRefused,
  decodeRunnerRelease,
  DEFAULT_RUNNER_PACKAGES,
  encodeRunnerRelease,
  Provider,
  RUNNER_VERSION_LATEST,
  ssmPaths,
  type FleetConfig,
  type PublishedRelease,
  type ResolvedRunnerRelease,
  type RunnerReleaseSources,
} from '../shared/contract';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { decideRelease } from './decide';
import { fetchGithubRelease, fetchGitlabRelease, type Fetch, type FetchedRelease } from './fetch';

export interface RunnerReleaseDeps {
  readonly ssm: SSMClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly sources: RunnerReleaseSources;
  readonly fetch?: Fetch;
  readonly now?: () => Date;
  readonly sink?: Sink;
}

export interface RunnerReleaseSummary {
  /** Per provider resolved this run: the version stored after it, and the problem if any. */
  readonly providers: Partial<Record<Provider, { readonly version?: string; readonly written: boolean; readonly problem?: string }>>;
  /** Per GitHub pool: days until GitHub refuses the version it installs. */
  readonly daysLeft: Record<string, number>;
}

/**
 * The release resolver (on a schedule, docs/control-plane.md "Runner updates"), in steps:
 * for each provider a pool follows, read the stored release, fetch the newest, decide, write a
 * newer good one; then, for every GitHub pool, publish the days GitHub still accepts the version
 * it installs (its pin, or the stored release): a stuck resolution shows there too.
 */
export function createRunnerReleaseHandler(deps: RunnerReleaseDeps): () => Promise<RunnerReleaseSummary> {
  const now = deps.now ?? (() => new Date());
  return async () => {
    const config = await deps.loadConfig();
    const log = createLogger({ fn: 'runner-release' }, deps.sink);
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    const providers: RunnerReleaseSummary['providers'] = {};
    const daysLeft: Record<string, number> = {};
    try {
      const following = [...new Set(config.pools.filter((p) => p.runnerVersion === RUNNER_VERSION_LATEST).map((p) => p.provider))];
      const fetched = new Map<Provider, FetchedRelease>();
      const current = new Map<Provider, ResolvedRunnerRelease>();
      for (const provider of following) {
        const l = log.child({ provider });
        const outcome = await resolveProvider(deps, config, provider, l);
        fetched.set(provider, outcome.fetched);
        if (outcome.current) current.set(provider, outcome.current);
        providers[provider] = { ...(outcome.current ? { version: outcome.current.version } : {}), written: outcome.written, ...(outcome.problem ? { problem: outcome.problem } : {}) };
        if (outcome.problem) metrics.add(config.metrics.names.runnerReleaseProblems, {});
      }
      const githubPools = config.pools.filter((p) => p.provider === Provider.GITHUB && p.runnerVersion !== undefined);
      if (githubPools.length > 0) {
        const history = await githubHistory(deps, fetched.get(Provider.GITHUB), log);
        for (const pool of githubPools) {
          if (!history) continue;
          const version = pool.runnerVersion === RUNNER_VERSION_LATEST ? (current.get(Provider.GITHUB)?.version ?? DEFAULT_RUNNER_PACKAGES[Provider.GITHUB].version) : pool.runnerVersion!;
          const days = daysUntilRefused(version, history, now());
          daysLeft[pool.name] = days;
          metrics.add(config.metrics.names.runnerDaysLeft, { [config.metrics.dimensions.pool]: pool.name }, days);
          log.info('runner version window', { pool: pool.name, version, daysLeft: days });
        }
      }
    } finally {
      metrics.flush();
    }
    return { providers, daysLeft };
  };
}

interface ProviderOutcome {
  readonly fetched: FetchedRelease;
  readonly current?: ResolvedRunnerRelease;
  readonly written: boolean;
  readonly problem?: string;
}

async function resolveProvider(deps: RunnerReleaseDeps, config: FleetConfig, provider: Provider, log: Logger): Promise<ProviderOutcome> {
  const name = ssmPaths(config.prefix).runnerRelease(provider);
  const fetched = await (provider === Provider.GITHUB ? fetchGithubRelease : fetchGitlabRelease)(deps.sources, deps.fetch);
  const stored = await readStored(deps, name, log);
  if (stored === 'unreadable') {
    // Writing blind could move the release backwards: the next run decides.
    log.error('runner release not resolved: the stored release cannot be read', { parameter: name, reason: 'unreadable-parameter' });
    return { fetched, written: false, problem: 'unreadable-parameter' };
  }
  const decision = decideRelease(stored, fetched);
  if (decision.action === 'keep') {
    if (decision.problem) log.error('runner release not resolved: the last good one stays', { parameter: name, reason: decision.problem, detail: decision.detail, stored: stored?.version });
    return { fetched, ...(stored ? { current: stored } : {}), written: false, ...(decision.problem ? { problem: decision.problem } : {}) };
  }
  const value = encodeRunnerRelease(decision.release);
  try {
    // Overwrite with the same value is idempotent: a lost answer is retried safely.
    await deps.aws.send(deps.ssm, new PutParameterCommand({ Name: name, Value: value, Type: 'String', Overwrite: true }), WRITE_IDEMPOTENT);
  } catch (error) {
    // Every answer lost: the write may have landed. What the parameter holds now says.
    if (!((error instanceof UnknownOutcomeError || isUnknownOutcome(error)) && (await holds(deps, name, value)))) {
      log.error('runner release not resolved: writing it failed, the last good one stays', { parameter: name, reason: 'write-failed', error: errorName(error) });
      return { fetched, ...(stored ? { current: stored } : {}), written: false, problem: 'write-failed' };
    }
  }
  log.info('runner release resolved', { parameter: name, version: decision.release.version, previous: stored?.version, publishedAt: decision.release.publishedAt });
  return { fetched, current: decision.release, written: true };
}

/** Whether the parameter holds `value` (read back after a write whose answers were all lost; unreadable: not known to). */
async function holds(deps: RunnerReleaseDeps, name: string, value: string): Promise<boolean> {
  try {
    return (await deps.aws.send<GetParameterCommandOutput>(deps.ssm, new GetParameterCommand({ Name: name }), READ)).Parameter?.Value === value;
  } catch {
    return false;
  }
}

/** The stored release; undefined when none is stored yet, 'unreadable' when SSM did not answer or it does not parse. */
async function readStored(deps: RunnerReleaseDeps, name: string, log: Logger): Promise<ResolvedRunnerRelease | undefined | 'unreadable'> {
  try {
    const out = await deps.aws.send<GetParameterCommandOutput>(deps.ssm, new GetParameterCommand({ Name: name }), READ);
    const release = decodeRunnerRelease(out.Parameter?.Value ?? '');
    if (!('problems' in release)) return release;
    log.error('the stored runner release does not parse', { parameter: name, problems: release.problems });
    return 'unreadable';
  } catch (error) {
    if (errorName(error) === 'ParameterNotFound') return undefined;
    log.warn('reading the stored runner release failed', { parameter: name, error: errorName(error) });
    return 'unreadable';
  }
}

/** GitHub's release dates: from this run's fetch, or read for the pinned pools alone. */
async function githubHistory(deps: RunnerReleaseDeps, fetched: FetchedRelease | undefined, log: Logger): Promise<readonly PublishedRelease[] | undefined> {
  const got = fetched ?? (await fetchGithubRelease(deps.sources, deps.fetch));
  if (got.history && got.history.length > 0) return got.history;
  if (!fetched) log.error('runner version window unknown: GitHub\'s releases could not be read', { reason: 'problem' in got ? got.problem : 'malformed', detail: 'problem' in got ? got.detail : undefined });
  return undefined;
}
