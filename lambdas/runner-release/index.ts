import { AwsCaller } from '../shared/aws-call';
import { DEFAULT_RUNNER_RELEASE_SOURCES, LAMBDA_ENV, type RunnerReleaseSources } from '../shared/contract';
import { productionClients } from '../shared/clients';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { createRunnerReleaseHandler } from './handler';

const clients = productionClients();
const sources: RunnerReleaseSources = { ...DEFAULT_RUNNER_RELEASE_SOURCES, ...(JSON.parse(process.env[LAMBDA_ENV.runnerReleaseSources] ?? '{}') as Partial<RunnerReleaseSources>) };

/** The release resolver, on a schedule. */
export const handler = createRunnerReleaseHandler({
  ssm: clients.ssm,
  aws: new AwsCaller(),
  loadConfig: () => loadFleetConfig(clients.ssm),
  sources,
});
