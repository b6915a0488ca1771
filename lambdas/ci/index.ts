// PLACEHOLDER: replaced by the webhooks branch at merge
import type { SSMClient } from '@aws-sdk/client-ssm';
import type { CiProvider, FleetConfig, Provider } from '../shared/contract';

export interface CiProviderDeps {
  readonly ssm: SSMClient;
  readonly fetch?: typeof fetch;
}

export function createCiProviders(config: FleetConfig, deps: CiProviderDeps): Partial<Record<Provider, CiProvider>> {
  void config;
  void deps;
  throw new Error('lambdas/ci not merged');
}
