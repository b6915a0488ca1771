import { GetParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import { LAMBDA_ENV, parseFleetConfig, type FleetConfig } from './contract';

/** How long a container trusts the FleetConfig it read before reading it again. */
const CACHE_MS = 60_000;

interface Cached {
  readonly at: number;
  readonly config: FleetConfig;
}
let cached: Cached | undefined;

/**
 * Reads the FleetConfig from the environment (FLEET_CONFIG) or from the SSM parameter
 * named by FLEET_CONFIG_PARAMETER, validated by the contract's reader. A container keeps
 * one copy for a minute, so a deploy that changes it reaches warm containers soon.
 */
export async function loadFleetConfig(ssm: SSMClient, env: NodeJS.ProcessEnv = process.env, now = Date.now()): Promise<FleetConfig> {
  const inline = env[LAMBDA_ENV.fleetConfig];
  if (inline) return parseFleetConfig(inline);
  const name = env[LAMBDA_ENV.fleetConfigParameter];
  if (!name) throw new Error(`neither ${LAMBDA_ENV.fleetConfig} nor ${LAMBDA_ENV.fleetConfigParameter} is set`);
  if (cached && now - cached.at < CACHE_MS) return cached.config;
  const out = await ssm.send(new GetParameterCommand({ Name: name }), { abortSignal: AbortSignal.timeout(5_000) });
  const value = out.Parameter?.Value;
  if (!value) throw new Error(`fleet config parameter ${name} is empty`);
  cached = { at: now, config: parseFleetConfig(value) };
  return cached.config;
}

/** For tests: forget the cached copy. */
export function clearFleetConfigCache(): void {
  cached = undefined;
}
