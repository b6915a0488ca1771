import { CancelSpotInstanceRequestsCommand, TerminateInstancesCommand, type EC2Client } from '@aws-sdk/client-ec2';
import type { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { DescribeRuleCommand, DisableRuleCommand, type DescribeRuleCommandOutput, type EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { GetEventSourceMappingCommand, UpdateEventSourceMappingCommand, type GetEventSourceMappingCommandOutput, type LambdaClient } from '@aws-sdk/client-lambda';
import { DeleteParametersCommand, GetParameterCommand, GetParametersByPathCommand, type GetParametersByPathCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { actionOf, errorName, READ, withTimeout, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import { Provider, ssmPaths, tagKeys, type CiProvider, type FleetConfig } from '../shared/contract';
import { GitHubApiError, GitLabApiError } from '../ci';
import { chunks } from '../shared/delete-configs';
import { describeFleet, LIVE_STATES, repositoriesOf } from '../shared/instances';
import { createLogger, type Logger, type Sink } from '../shared/log';
import { decideDrain, type DrainObservation, type DrainSettings, type RunnerList } from './decide';
import { readDeleteVerdict, type DeleteVerdict } from './delete-cause';

/** What stops the fleet scaling: the jobs queue's event source mappings and the schedules. */
export interface ScalingSources {
  readonly eventSourceMappings: readonly string[];
  readonly schedules: readonly string[];
}

export interface DrainDeps {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  /** Disables the jobs queue's event source mappings. */
  readonly lambda: LambdaClient;
  /** Disables the schedules. */
  readonly events: EventBridgeClient;
  /** Reads the stack's status: a Delete drains only when the stack goes away. */
  readonly cloudformation: CloudFormationClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly providers: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>;
  readonly sources: ScalingSources;
  readonly settings: DrainSettings;
  /**
   * Providers whose last `listRunners` stopped at the page cap (filled by the providers'
   * `onListTruncated`); observe clears a provider before listing and reads it after.
   */
  readonly truncatedLists?: Set<Provider>;
  readonly now?: () => Date;
  readonly sink?: Sink;
  /** Time one poll may spend acting before it leaves the rest to the next poll (default 90 s). */
  readonly passBudgetMs?: number;
  readonly ciTimeoutMs?: number;
}

/** The provider framework's onEvent answer; `Data` reaches every isComplete call. */
export interface OnEventResponse {
  readonly PhysicalResourceId?: string;
  readonly Data?: { readonly DrainStartedAt: string } | { readonly DrainSkipped: string };
}
export interface IsCompleteResponse {
  readonly IsComplete: boolean;
}
/** The isComplete request: the CloudFormation event with onEvent's answer merged in. */
export type IsCompleteEvent = CloudFormationCustomResourceEvent & { readonly Data?: { readonly DrainStartedAt?: string; readonly DrainSkipped?: string } };

/**
 * Thrown by isComplete to fail the delete: the provider framework answers CloudFormation
 * FAILED with this message as the reason, so the stack shows DELETE_FAILED and why.
 */
export class DrainFailedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DrainFailedError';
  }
}

const gone = (error: unknown) => errorName(error) === 'ResourceNotFoundException';
const AUTHORIZATION = new Set(['AccessDenied', 'AccessDeniedException', 'UnauthorizedOperation', 'UnrecognizedClientException']);
/** Lambda's states of a mapping that no longer (or soon no longer) polls. */
const MAPPING_STOPPED = new Set(['Disabled', 'Deleting']);

/**
 * The fleet's drain, run by the CDK provider framework when the stack is deleted; Create and
 * Update do nothing. A Delete drains only when the stack goes away (delete-cause.ts): one
 * sent by an update that replaces or removes the drain leaves the fleet alone. onEvent reads
 * the stack's status, then stops scaling (disables the jobs queue's
 * event source mappings and the schedules) and records the time; each isComplete poll then
 * observes what is left, acts on it (terminate, cancel spot requests, delete parameters,
 * deregister runners) and answers complete only when nothing is left and the quiet period has
 * passed. Every poll decides from observed state, so an action whose answer was lost, or an
 * instance launched by an invocation that started before the stop, is found by the next one.
 * Past the deadline isComplete throws, failing the delete with what is left as the reason.
 */
export function createDrainHandlers(deps: DrainDeps): {
  onEvent: (event: CloudFormationCustomResourceEvent) => Promise<OnEventResponse>;
  isComplete: (event: IsCompleteEvent) => Promise<IsCompleteResponse>;
} {
  const now = deps.now ?? (() => new Date());
  const log = createLogger({ fn: 'drain' }, deps.sink);
  const budgetMs = deps.passBudgetMs ?? 90_000;
  const ciTimeoutMs = deps.ciTimeoutMs ?? 10_000;

  return {
    async onEvent(event) {
      // Update keeps the physical id: a new one would make CloudFormation delete the old
      // resource, which is a Delete of the drain.
      if (event.RequestType !== 'Delete') return event.RequestType === 'Update' ? { PhysicalResourceId: event.PhysicalResourceId } : {};
      const verdict = await verdictOnDelete(deps, event.StackId, log);
      if (verdict.action === 'skip') {
        log.info('delete without draining', { reason: verdict.reason });
        return { PhysicalResourceId: event.PhysicalResourceId, Data: { DrainSkipped: verdict.reason } };
      }
      if (verdict.action === 'refuse') throw new DrainFailedError(`the drain did not run: ${verdict.reason}; see docs/operations.md#renaming-replacing-or-removing-the-fleet-in-an-update`);
      log.info('the stack goes away; draining', { reason: verdict.reason });
      const startedAt = now().toISOString();
      await stopScaling(deps, log);
      log.info('scaling stopped; draining', { eventSourceMappings: deps.sources.eventSourceMappings.length, schedules: deps.sources.schedules.length });
      return { PhysicalResourceId: event.PhysicalResourceId, Data: { DrainStartedAt: startedAt } };
    },

    async isComplete(event) {
      if (event.RequestType !== 'Delete' || event.Data?.DrainSkipped !== undefined) return { IsComplete: true };
      const started = Date.parse(event.Data?.DrainStartedAt ?? '');
      if (!Number.isFinite(started)) throw new DrainFailedError('the drain has no start time (onEvent did not run?): delete again');
      const passStart = now().getTime();
      const elapsedMs = passStart - started;
      let config: FleetConfig | undefined;
      let observed: DrainObservation;
      try {
        config = await deps.loadConfig();
        observed = await observe(deps, config, elapsedMs, ciTimeoutMs, log);
      } catch (error) {
        if (error instanceof DrainFailedError) throw error;
        // Nothing can be decided from a partial reading (or without the config): the next poll
        // observes again. A refusal will not pass by itself: fail at once, naming it.
        log.warn('observing the fleet failed; the next poll retries', { error: errorName(error) });
        if (elapsedMs >= deps.settings.deadlineMs || AUTHORIZATION.has(errorName(error))) {
          const fleet = config ? `the drain of ${config.prefix}` : 'the drain';
          throw new DrainFailedError(`${fleet} could not observe the fleet: ${errorName(error)} (${(error as Error).message}); see docs/operations.md#a-stack-left-in-delete_failed`);
        }
        return { IsComplete: false };
      }
      const step = decideDrain(observed, deps.settings);
      if (step.complete) {
        log.info('drained: no instance, parameter or runner of the fleet is left');
        return { IsComplete: true };
      }
      if (step.failed) {
        const minutes = Math.round(deps.settings.deadlineMs / 60_000);
        throw new DrainFailedError(`the drain of ${config.prefix} did not finish within ${minutes} min; left: ${step.remaining.join('; ')}. See docs/operations.md#a-stack-left-in-delete_failed`);
      }
      log.info('draining', { remaining: step.remaining });
      const overBudget = () => now().getTime() - passStart > budgetMs;
      await act(deps, config, step, overBudget, ciTimeoutMs, log);
      return { IsComplete: false };
    },
  };
}

/** Whether this Delete drains, from the stack's status (delete-cause.ts `readDeleteVerdict`). */
function verdictOnDelete(deps: DrainDeps, stackId: string, log: Logger): Promise<DeleteVerdict> {
  return readDeleteVerdict(
    {
      aws: deps.aws,
      cloudformation: deps.cloudformation,
      log,
      who: 'the drain',
      replaced: 'the drain',
      hint: ' Retry the operation; see docs/operations.md#a-stack-left-in-delete_failed',
      fail: (message) => new DrainFailedError(message),
    },
    stackId,
  );
}

/**
 * Disables every mapping and schedule. Repeating either is harmless, so lost answers are
 * retried; one already deleted counts as stopped. A definite refusal (for example access
 * denied) fails the delete at once: draining while the fleet still scales would not end.
 */
async function stopScaling(deps: DrainDeps, log: Logger): Promise<void> {
  const calls: (readonly [LambdaClient | EventBridgeClient, UpdateEventSourceMappingCommand | DisableRuleCommand])[] = [
    ...deps.sources.eventSourceMappings.map((UUID) => [deps.lambda, new UpdateEventSourceMappingCommand({ UUID, Enabled: false })] as const),
    ...deps.sources.schedules.map((Name) => [deps.events, new DisableRuleCommand({ Name })] as const),
  ];
  for (const [client, command] of calls) {
    try {
      await deps.aws.send(client, command, WRITE_IDEMPOTENT);
    } catch (error) {
      if (gone(error)) continue;
      const call = actionOf(command);
      log.error('stopping scaling failed', { call, target: JSON.stringify(command.input), error: errorName(error) });
      throw new DrainFailedError(`the drain could not stop scaling: ${call} ${JSON.stringify(command.input)} failed with ${errorName(error)}; see docs/operations.md#a-stack-left-in-delete_failed`);
    }
  }
}

/**
 * The mappings and schedules not observed stopped yet. One still enabled is disabled again
 * (a disable whose answer was lost, or one re-enabled by hand): the stop is observed, never assumed.
 */
async function scalingNotStopped(deps: DrainDeps): Promise<string[]> {
  const pending: string[] = [];
  for (const UUID of deps.sources.eventSourceMappings) {
    const state = await stateOf<GetEventSourceMappingCommandOutput>(deps, deps.lambda, new GetEventSourceMappingCommand({ UUID }));
    if (state === undefined || MAPPING_STOPPED.has(state)) continue;
    pending.push(`mapping ${UUID} ${state}`);
    if (state === 'Enabled' || state === 'Enabling') await deps.aws.send(deps.lambda, new UpdateEventSourceMappingCommand({ UUID, Enabled: false }), WRITE_IDEMPOTENT);
  }
  for (const Name of deps.sources.schedules) {
    const state = await stateOf<DescribeRuleCommandOutput>(deps, deps.events, new DescribeRuleCommand({ Name }));
    if (state === undefined || state === 'DISABLED') continue;
    pending.push(`schedule ${Name} ${state}`);
    await deps.aws.send(deps.events, new DisableRuleCommand({ Name }), WRITE_IDEMPOTENT);
  }
  return pending;
}

/** The state of a mapping or rule; undefined once it is deleted. */
async function stateOf<T extends { State?: string }>(deps: DrainDeps, client: LambdaClient | EventBridgeClient, command: GetEventSourceMappingCommand | DescribeRuleCommand): Promise<string | undefined> {
  try {
    return (await deps.aws.send<T>(client, command, READ)).State ?? 'unknown';
  } catch (error) {
    if (gone(error)) return undefined;
    throw error;
  }
}

async function observe(deps: DrainDeps, config: FleetConfig, elapsedMs: number, ciTimeoutMs: number, log: Logger): Promise<DrainObservation> {
  const scaling = await scalingNotStopped(deps);
  const keys = tagKeys(config.prefix);
  const paths = ssmPaths(config.prefix);
  const instances = await describeFleet(deps.aws, deps.ec2, keys, { states: [...LIVE_STATES, 'shutting-down'] });
  const parameters: string[] = [];
  for (const root of [paths.runnerConfigRoot, paths.poolStateRoot, paths.runnerReleaseRoot]) parameters.push(...(await parameterNames(deps, root)));
  const providers = deps.providers(config);
  const runners = new Map<Provider, RunnerList>();
  for (const provider of new Set(config.pools.map((p) => p.provider))) {
    const ci = providers[provider];
    const credential = provider === Provider.GITHUB ? config.parameters.github.appPrivateKey : config.parameters.gitlab.token;
    if (!ci) {
      runners.set(provider, { unknown: 'no client for the provider' });
      continue;
    }
    if (!(await exists(deps, credential))) {
      // Without its credential no scale-up could register a runner: there is nothing to deregister.
      log.warn('the provider credential does not exist; no runner of this fleet can be registered there', { provider, parameter: credential });
      runners.set(provider, { runners: [] });
      continue;
    }
    try {
      deps.truncatedLists?.delete(provider);
      const listed = await withTimeout(`${provider} listRunners`, ciTimeoutMs, () => ci.listRunners({ repositories: repositoriesOf(instances, keys) }));
      // Runners beyond the page cap may remain: deregister those listed, but never read it as empty.
      runners.set(provider, deps.truncatedLists?.has(provider) ? { runners: listed, truncated: true } : { runners: listed });
    } catch (error) {
      if (refusedByCi(error)) {
        log.error('the CI service refused the drain', { provider, error: errorName(error) });
        throw new DrainFailedError(
          `the drain of ${config.prefix} cannot list its ${provider} runners: ${errorName(error)} (${(error as Error).message}). Check the credential (${credential}) and the key that encrypts it, or deregister the runners by hand; see docs/operations.md#a-stack-left-in-delete_failed`,
        );
      }
      log.warn('listing runners failed; the next poll retries', { provider, error: errorName(error) });
      runners.set(provider, { unknown: `${errorName(error)}: ${(error as Error).message}`.slice(0, 200) });
    }
  }
  return { instances, parameters, runners, scalingNotStopped: scaling, elapsedMs };
}

/**
 * An authorization failure, which no retry mends: reading the credential refused (AccessDenied,
 * also for a KMS key the role may not use), or the CI service answering 401, or 403 other than
 * a rate limit (GitHub answers a rate limit with 403 too, naming it in the message).
 */
function refusedByCi(error: unknown): boolean {
  if (AUTHORIZATION.has(errorName(error))) return true;
  const status = (error as { status?: unknown } | undefined)?.status;
  if (!(error instanceof GitHubApiError || error instanceof GitLabApiError) || typeof status !== 'number') return false;
  return status === 401 || (status === 403 && !/rate limit/i.test(error.message));
}

/** Whether a parameter exists (read without decrypting: the drain needs no secret for it). */
async function exists(deps: DrainDeps, name: string): Promise<boolean> {
  try {
    await deps.aws.send(deps.ssm, new GetParameterCommand({ Name: name, WithDecryption: false }), READ);
    return true;
  } catch (error) {
    if (errorName(error) === 'ParameterNotFound') return false;
    throw error;
  }
}

/** Every parameter name under `path` (recursive, values not decrypted), paginated. */
async function parameterNames(deps: DrainDeps, path: string): Promise<string[]> {
  const names: string[] = [];
  let token: string | undefined;
  do {
    const out = await deps.aws.send<GetParametersByPathCommandOutput>(
      deps.ssm,
      new GetParametersByPathCommand({ Path: path, Recursive: true, WithDecryption: false, MaxResults: 10, ...(token ? { NextToken: token } : {}) }),
      READ,
    );
    for (const p of out.Parameters ?? []) if (p.Name) names.push(p.Name);
    token = out.NextToken;
  } while (token);
  return names;
}

/**
 * One poll's actions, in batches, each failure logged and left to the next poll (which
 * observes again). Repeating any of them is harmless in a drain: the calls are idempotent,
 * and every name under the fleet's roots is to go, whoever wrote it.
 */
async function act(deps: DrainDeps, config: FleetConfig, step: ReturnType<typeof decideDrain>, overBudget: () => boolean, ciTimeoutMs: number, log: Logger): Promise<void> {
  const tried = async (what: string, fields: Record<string, string | number>, run: () => Promise<unknown>) => {
    if (overBudget()) return;
    try {
      await run();
      log.info(what, fields);
    } catch (error) {
      log.warn(`${what} failed; the next poll retries`, { ...fields, error: errorName(error) });
    }
  };
  // A persistent spot request relaunches its instance when the instance is terminated.
  for (const ids of chunks(step.cancelSpotRequests, 100)) {
    await tried('cancelled spot requests', { requests: ids.length }, () => deps.aws.send(deps.ec2, new CancelSpotInstanceRequestsCommand({ SpotInstanceRequestIds: ids }), WRITE_IDEMPOTENT));
  }
  for (const batch of chunks(step.terminate, 100)) {
    await tried('terminated', { instances: batch.length, ids: batch.map((i) => i.id).join(',') }, () =>
      deps.aws.send(deps.ec2, new TerminateInstancesCommand({ InstanceIds: batch.map((i) => i.id) }), WRITE_IDEMPOTENT),
    );
  }
  for (const names of chunks(step.deleteParameters, 10)) {
    await tried('deleted parameters', { parameters: names.length }, () => deps.aws.send(deps.ssm, new DeleteParametersCommand({ Names: names }), WRITE_IDEMPOTENT));
  }
  const providers = deps.providers(config);
  for (const { provider, runnerId } of step.deregister) {
    const ci = providers[provider];
    if (ci) await tried('deregistered runner', { provider, runnerId }, () => withTimeout('deleteRunner', ciTimeoutMs, () => ci.deleteRunner(runnerId)));
  }
}
