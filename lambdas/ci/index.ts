import type { SSMClient } from '@aws-sdk/client-ssm';
import type { CiProvider, FleetConfig, Provider } from '../shared/contract';
import { createSecretCache } from '../shared/secrets';
import { GitHubProvider } from './github';
import { GitLabProvider } from './gitlab';

export { GitHubProvider, GitHubApiError, type GitHubProviderOptions } from './github';
export { GitLabProvider, GitLabApiError, type GitLabProviderOptions } from './gitlab';

export interface CiProviderDeps {
  readonly ssm: SSMClient;
  readonly fetch?: typeof fetch;
}

/**
 * The CI providers for the connections the fleet config has. Synchronous: each provider
 * reads its secret (App private key, GitLab token) from SSM on first use and keeps it in a
 * bounded per-container cache, so a Lambda that never calls a provider never reads its secret.
 */
export function createCiProviders(config: FleetConfig, deps: CiProviderDeps): Partial<Record<Provider, CiProvider>> {
  const secrets = createSecretCache(deps.ssm, { ttlMs: 15 * 60_000, maxEntries: 4 });
  const out: Partial<Record<Provider, CiProvider>> = {};
  if (config.github) {
    out.github = new GitHubProvider({
      prefix: config.prefix,
      github: config.github,
      pools: config.pools,
      privateKey: () => secrets.get(config.parameters.github.appPrivateKey),
      ...(deps.fetch ? { fetch: deps.fetch } : {}),
    });
  }
  if (config.gitlab) {
    out.gitlab = new GitLabProvider({
      prefix: config.prefix,
      gitlab: config.gitlab,
      pools: config.pools,
      token: () => secrets.get(config.parameters.gitlab.token),
      ...(deps.fetch ? { fetch: deps.fetch } : {}),
    });
  }
  return out;
}
