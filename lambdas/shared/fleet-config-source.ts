import { GetParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import { LAMBDA_ENV, parseFleetConfig, type FleetConfig } from './contract';

/** How long a container trusts the FleetConfig it read before reading it again. */
const CACHE_MS = 60_000;
/** A Lambda reads one parameter; the bound only keeps a misuse from growing the map. */
const MAX_ENTRIES = 4;
const READ_TIMEOUT_MS = 5_000;

interface Cached {
  readonly at: number;
  readonly value: string;
  readonly config: FleetConfig;
}
/**
 * The same text always yields the same object: callers keep per-config state keyed on the
 * object's identity (`providersOnce`: the CI providers with their token and secret caches),
 * which a fresh parse per invocation would rebuild every time.
 */
let inlineCopy: { readonly value: string; readonly config: FleetConfig } | undefined;
/** Keyed by parameter name, so a container whose environment names another parameter never gets the old one's config. */
const cached = new Map<string, Cached>();

export interface LoadFleetConfigOptions {
  /** A caller's tighter deadline (the webhook's); the read is also bounded by `timeoutMs`. */
  readonly signal?: AbortSignal;
  /**
   * The read's own bound. A caller with a deadline passes its step's cap, so the deadline,
   * not a shorter fixed bound ending the read with another error, decides a slow read.
   * @default 5000
   */
  readonly timeoutMs?: number;
}

/**
 * Reads the FleetConfig from the environment (FLEET_CONFIG) or from the SSM parameter
 * named by FLEET_CONFIG_PARAMETER, validated by the contract's reader. A container keeps
 * one copy for a minute, so a deploy that changes it reaches warm containers soon.
 */
export async function loadFleetConfig(
  ssm: SSMClient,
  env: NodeJS.ProcessEnv = process.env,
  now = Date.now(),
  options: LoadFleetConfigOptions = {},
): Promise<FleetConfig> {
  const inline = env[LAMBDA_ENV.fleetConfig];
  if (inline) {
    if (inlineCopy?.value !== inline) inlineCopy = { value: inline, config: parseFleetConfig(inline) };
    return inlineCopy.config;
  }
  const name = env[LAMBDA_ENV.fleetConfigParameter];
  if (!name) throw new Error(`neither ${LAMBDA_ENV.fleetConfig} nor ${LAMBDA_ENV.fleetConfigParameter} is set`);
  const hit = cached.get(name);
  if (hit && now - hit.at < CACHE_MS) return hit.config;
  const timeout = AbortSignal.timeout(options.timeoutMs ?? READ_TIMEOUT_MS);
  const out = await ssm.send(new GetParameterCommand({ Name: name }), { abortSignal: options.signal ? AbortSignal.any([timeout, options.signal]) : timeout });
  const value = out.Parameter?.Value;
  if (!value) throw new Error(`fleet config parameter ${name} is empty`);
  const config = hit?.value === value ? hit.config : parseFleetConfig(value);
  cached.delete(name);
  cached.set(name, { at: now, value, config });
  while (cached.size > MAX_ENTRIES) cached.delete(cached.keys().next().value as string);
  return config;
}

/** For tests: forget the cached copies. */
export function clearFleetConfigCache(): void {
  cached.clear();
  inlineCopy = undefined;
}
