import { EC2Client } from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { CiProvider, FleetConfig, Provider } from './contract';

/**
 * Options of every production AWS client. maxAttempts is 1 because `AwsCaller` does the
 * retrying: it knows which calls are safe to repeat (see aws-call.ts), the SDK's retry does
 * not. Socket timeouts bound every request below the caller's own deadline.
 */
export const PRODUCTION_CLIENT_OPTIONS = {
  maxAttempts: 1,
  requestHandler: { connectionTimeout: 2_000, requestTimeout: 8_000 },
} as const;

/** The production EC2, SSM and SQS clients (a function needing others builds them with the same options). */
export function productionClients(): { ec2: EC2Client; ssm: SSMClient; sqs: SQSClient } {
  const common = PRODUCTION_CLIENT_OPTIONS;
  return { ec2: new EC2Client(common), ssm: new SSMClient(common), sqs: new SQSClient(common) };
}

/** An environment variable the construct sets: missing, the cold start fails with its name. */
export function requiredEnv(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
}

/**
 * The CI providers for a config, built once per config object: the config loader hands out
 * the same object until it reloads, so this holds one entry (no growth across invocations).
 */
export function providersOnce(
  build: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>,
): (config: FleetConfig) => Partial<Record<Provider, CiProvider>> {
  let last: { config: FleetConfig; providers: Partial<Record<Provider, CiProvider>> } | undefined;
  return (config) => {
    if (last?.config !== config) last = { config, providers: build(config) };
    return last.providers;
  };
}
