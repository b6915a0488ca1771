import type { SSMClient } from '@aws-sdk/client-ssm';
import { METRIC_NAMES, Provider, ssmPaths, type CiProvider, type FleetConfig } from '../shared/contract';
import { createLogger, emitMetrics, type Logger, type Sink } from '../shared/log';
import { createSecretCache } from '../shared/secrets';
import type { ListTruncated } from './github';
import { GitHubProvider } from './github';
import { GitLabProvider } from './gitlab';

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
  const secrets = createSecretCache(deps.ssm, { ttlMs: 15 * 60_000, maxEntries: 4, ...(deps.secretReadTimeoutMs ? { timeoutMs: deps.secretReadTimeoutMs } : {}) });
  const out: Partial<Record<Provider, CiProvider>> = {};
  const log = deps.logger ?? createLogger({ fn: 'ci' });
  const truncated = (provider: Provider) => (info: ListTruncated) => {
    log.warn('runner list stopped at the page cap: runners beyond it are not swept, and their instances not terminated as finished', { provider, scope: info.scope, pages: info.pages });
    emitMetrics(config.metrics.namespace, {}, { [METRIC_NAMES.runnerListTruncated]: 1 }, 'Count', deps.metricSink);
    deps.onListTruncated?.(provider, info);
  };
  if (config.github) {
    const enterpriseToken = ssmPaths(config.prefix).githubEnterpriseToken;
    out.github = new GitHubProvider({
      prefix: config.prefix,
      github: config.github,
      pools: config.pools,
      privateKey: () => secrets.get(config.parameters.github.appPrivateKey),
      invalidatePrivateKey: () => secrets.invalidate(config.parameters.github.appPrivateKey),
      // Read only by pools that register at an enterprise.
      enterpriseToken: () => secrets.get(enterpriseToken),
      invalidateEnterpriseToken: () => secrets.invalidate(enterpriseToken),
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
