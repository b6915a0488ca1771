import { scaleSetScope, type CiProvider, type FleetConfig, type PoolConfig, type ScaleSetApi, type ScaleSetScope } from '../../shared/contract';
import type { GitHubAnswer } from '../github';
import { AdminTokens } from './admin-token';
import { ScaleSetClient } from './client';
import { githubConfigUrl, registrationTokenRoute } from './config-url';
import { ScaleSetApiError } from './errors';

export { ScaleSetClient, scaleSetLabels, SCALE_SET_API_VERSION } from './client';
export { AdminTokens, jwtExpiry, type AdminConnection } from './admin-token';
export { githubConfigUrl } from './config-url';
export { ScaleSetApiError } from './errors';
export { parseMessage, ScaleSetMessageError } from './messages';

/** The installation-token call of the fleet's GitHub provider (`GitHubApps`, `GitHubProvider`): the registration token is minted with it. */
export interface InstallationCaller {
  installationRequest(operation: string, route: string, params: Record<string, unknown>, target?: string): Promise<GitHubAnswer>;
}

/** The fleet's GitHub provider as the caller the client mints registration tokens with. */
export function installationCallerOf(provider: CiProvider | undefined): InstallationCaller {
  if (provider === undefined) throw new Error('the fleet has no GitHub connection: a scale set needs one');
  if (!('installationRequest' in provider) || typeof provider.installationRequest !== 'function') throw new Error('the GitHub provider cannot mint registration tokens');
  return provider as CiProvider & InstallationCaller;
}

/** Bound on one GetMessage: past the service's own hold (about 50 s), so a poll ends with its 202, not this. */
export const LONG_POLL_TIMEOUT_MS = 70_000;

export interface ScaleSetApiDeps {
  /** The fleet's GitHub provider (lambdas/ci/index.ts `createCiProviders(...).github`): its Apps, keys and installation tokens. */
  readonly github: InstallationCaller;
  readonly fetch?: typeof fetch;
  /** Bound on one call other than GetMessage (default 10 s). */
  readonly timeoutMs?: number;
  /** Bound on one GetMessage (default 70 s: the service holds a poll about 50 s). */
  readonly longPollTimeoutMs?: number;
  readonly now?: () => number;
}

/**
 * The scale-set API of a pool's scope (its organisation, or its one repository), for the
 * listener, scale-up and the scale-set resource. One per pool and container: the admin token
 * it exchanges is kept until shortly before it expires.
 */
export function scaleSetApiFor(config: Pick<FleetConfig, 'github'>, pool: PoolConfig, deps: ScaleSetApiDeps): ScaleSetApi {
  const github = config.github;
  if (!github) throw new Error(`pool "${pool.name}": the fleet has no GitHub connection`);
  return scaleSetApiAt(config, scaleSetScope(github, pool), deps);
}

/**
 * The scale-set API of a scope named directly: the scale-set resource deletes scale sets of
 * pools the current FleetConfig may no longer have.
 */
export function scaleSetApiAt(config: Pick<FleetConfig, 'github'>, scope: ScaleSetScope, deps: ScaleSetApiDeps): ScaleSetApi {
  const github = config.github;
  if (!github) throw new Error('the fleet has no GitHub connection');
  const fetchFn = deps.fetch ?? globalThis.fetch;
  const timeoutMs = deps.timeoutMs ?? 10_000;
  const mint = registrationTokenRoute(scope);
  const admin = new AdminTokens({
    apiUrl: github.apiUrl,
    configUrl: githubConfigUrl(github.apiUrl, scope),
    registrationToken: async () => {
      const answer = await deps.github.installationRequest('registration-token', mint.route, mint.params, mint.target);
      const token = (answer.data as { token?: unknown } | undefined)?.token;
      if (typeof token !== 'string' || token === '') throw new ScaleSetApiError('registration-token', answer.status, 'the answer lacks the token');
      return token;
    },
    fetch: fetchFn,
    timeoutMs,
    now: deps.now ?? Date.now,
  });
  return new ScaleSetClient({ admin, fetch: fetchFn, timeoutMs, longPollTimeoutMs: deps.longPollTimeoutMs ?? LONG_POLL_TIMEOUT_MS });
}
