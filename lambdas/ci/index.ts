import type { SSMClient } from '@aws-sdk/client-ssm';
import { GITHUB_APPS_LOW_FRACTION, METRIC_DIMENSIONS, METRIC_NAMES, Provider, ssmPaths, type CiProvider, type FleetConfig } from '../shared/contract';
import { createLogger, emitMetrics, type Logger, type Sink } from '../shared/log';
import { createSecretCache } from '../shared/secrets';
import type { ListTruncated } from './github';
import { GitHubApps } from './github-apps';
import { GitLabProvider } from './gitlab';

export { GitHubApps, AppBudgets, type GitHubAppsOptions } from './github-apps';
export { GitHubProvider, GitHubApiError, type GitHubProviderOptions, type ListTruncated } from './github';
export { GitLabProvider, GitLabApiError, type GitLabProviderOptions } from './gitlab';

export interface CiProviderDeps {
  readonly ssm: SSMClient;
  readonly fetch?: typeof fetch;
  readonly logger?: Logger;
  /** Where EMF metric lines go (stdout in Lambda). */
  readonly metricSink?: Sink;
  /**
   * Told when a `listRunners` stopped at the page cap, besides the log line and metric: the
   * sweep must then not read a runner's absence from the list as "its job finished".
   */
  readonly onListTruncated?: (provider: Provider, info: ListTruncated) => void;
  /** Bound on one read of a provider's secret from SSM (the secret cache's default when unset). */
  readonly secretReadTimeoutMs?: number;
}

/**
 * The CI providers for the connections the fleet config has. Synchronous: each provider
 * reads its secret (App private key, GitLab token) from SSM on first use and keeps it in a
 * bounded per-container cache, so a Lambda that never calls a provider never reads its secret.
 */
export function createCiProviders(config: FleetConfig, deps: CiProviderDeps): Partial<Record<Provider, CiProvider>> {
  const secrets = createSecretCache(deps.ssm, { ttlMs: 15 * 60_000, maxEntries: 4 + (config.github?.additionalAppIds?.length ?? 0), ...(deps.secretReadTimeoutMs ? { timeoutMs: deps.secretReadTimeoutMs } : {}) });
  const out: Partial<Record<Provider, CiProvider>> = {};
  const log = deps.logger ?? createLogger({ fn: 'ci' });
  const truncated = (provider: Provider) => (info: ListTruncated) => {
    log.warn('runner list stopped at the page cap: runners beyond it are not swept, and their instances not terminated as finished', { provider, scope: info.scope, pages: info.pages });
    emitMetrics(config.metrics.namespace, {}, { [METRIC_NAMES.runnerListTruncated]: 1 }, 'Count', deps.metricSink);
    deps.onListTruncated?.(provider, info);
  };
  if (config.github) {
    // The first App keeps the fleet's first key parameter; each further App has its own.
    const paths = ssmPaths(config.prefix);
    const keys = [
      { appId: config.github.appId, parameter: config.parameters.github.appPrivateKey },
      ...(config.github.additionalAppIds ?? []).map((appId) => ({ appId, parameter: paths.githubAppPrivateKey(appId) })),
    ];
    out.github = new GitHubApps({
      prefix: config.prefix,
      github: config.github,
      pools: config.pools,
      apps: keys.map(({ appId, parameter }) => ({ appId, privateKey: () => secrets.get(parameter), invalidatePrivateKey: () => secrets.invalidate(parameter) })),
      // Read only by pools that register at an enterprise.
      enterpriseToken: () => secrets.get(paths.githubEnterpriseToken),
      invalidateEnterpriseToken: () => secrets.invalidate(paths.githubEnterpriseToken),
      // Twice the alarm's threshold: from there on every answer's figures are published.
      figuresEveryAnswerBelow: 2 * GITHUB_APPS_LOW_FRACTION,
      onFigures: (figures, best) => {
        for (const f of figures) {
          emitMetrics(config.metrics.namespace, { [METRIC_DIMENSIONS.appId]: f.appId }, { [METRIC_NAMES.githubAppRateRemaining]: f.remaining, [METRIC_NAMES.githubAppRateLimit]: f.limit }, 'None', deps.metricSink);
        }
        emitMetrics(config.metrics.namespace, {}, { [METRIC_NAMES.githubAppsBestRemainingFraction]: best }, 'None', deps.metricSink);
      },
      onNotInstalled: (appId, account) => log.warn('the GitHub App is not installed on the account: another App serves it for now', { appId, account }),
      onListTruncated: truncated(Provider.GITHUB),
      ...(deps.fetch ? { fetch: deps.fetch } : {}),
    });
  }
  if (config.gitlab) {
    out.gitlab = new GitLabProvider({
      prefix: config.prefix,
      gitlab: config.gitlab,
      pools: config.pools,
      token: () => secrets.get(config.parameters.gitlab.token),
      invalidateToken: () => secrets.invalidate(config.parameters.gitlab.token),
      onListTruncated: truncated(Provider.GITLAB),
      ...(deps.fetch ? { fetch: deps.fetch } : {}),
    });
  }
  return out;
}
