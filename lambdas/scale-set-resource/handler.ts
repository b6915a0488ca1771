import type { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { DeleteItemCommand, GetItemCommand, type DynamoDBClient, type GetItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { GetParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { errorName, READ, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, SCALE_SET_LEASE_ATTRIBUTES, scaleSetEntries, scaleSetLeaseKey, ssmPaths, type FleetConfig, type ScaleSetApi, type ScaleSetEntry, type ScaleSetScope } from '../shared/contract';
import { readDeleteVerdict } from '../drain/delete-cause';
import { createLogger, type Logger, type Sink } from '../shared/log';

/** The client of one scope (P's `scaleSetApiFor` from lambdas/ci/scale-set, wired in index.ts). */
export type ScaleSetApiFactory = (config: FleetConfig, scope: ScaleSetScope) => ScaleSetApi | Promise<ScaleSetApi>;

export interface ScaleSetResourceDeps {
  readonly cloudformation: CloudFormationClient;
  readonly aws: AwsCaller;
  /** Reads whether the App key parameters exist (never their values). */
  readonly ssm: SSMClient;
  /** The fleet's table: the listener's lease items (the session each names). */
  readonly dynamodb: DynamoDBClient;
  readonly tableName: string;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly scaleSetApiFor: ScaleSetApiFactory;
  readonly sink?: Sink;
}

export interface ScaleSetResourceResponse {
  readonly PhysicalResourceId: string;
  readonly Data?: Record<string, string>;
}

/** One physical id for the fleet's scale sets: an Update never replaces the resource. */
export const SCALE_SET_RESOURCE_ID = 'scale-sets';

/** Scope, runner group and name, compared as GitHub compares them (case-insensitively). */
function keyOf(e: ScaleSetEntry): string {
  return [e.organization ?? '', e.repository ?? '', e.runnerGroup, e.name].map((s) => s.toLowerCase()).join('|');
}

function entriesOf(properties: Record<string, unknown> | undefined): ScaleSetEntry[] {
  const raw = properties?.ScaleSets;
  if (raw === undefined) return [];
  if (typeof raw !== 'string') throw new Error('ScaleSets must be the JSON list the construct renders');
  return JSON.parse(raw) as ScaleSetEntry[];
}

/**
 * The scale-set resource's onEvent (CDK provider framework). Create and Update ensure each
 * pool's scale set (`ensureScaleSet` reads back by name, so a lost answer or a retried event
 * creates none twice); an Update deletes the scale sets the new properties no longer name.
 * Delete runs after the drain (the drain depends on every part of the fleet, this resource
 * too, so CloudFormation deletes it first): the runners are gone, and the scale sets are
 * deleted when the stack goes away. A Delete sent by an update that replaces this resource
 * (a renamed construct) must not delete scale sets the fleet still serves: then only those
 * the current FleetConfig no longer names go (the drain's `deleteVerdict` tells the two apart).
 */
export function createScaleSetResourceHandler(deps: ScaleSetResourceDeps): (event: CloudFormationCustomResourceEvent) => Promise<ScaleSetResourceResponse> {
  const log = createLogger({ component: 'scale-set-resource' }, deps.sink);
  return async (event) => {
    const wanted = entriesOf(event.ResourceProperties);
    if (event.RequestType === 'Create' || event.RequestType === 'Update') {
      const config = await deps.loadConfig();
      if (wanted.length > 0) await requireAppKeys(deps, config);
      const ids: Record<string, string> = {};
      for (const entry of wanted) ids[entry.pool] = String(await ensure(deps, config, entry, log));
      if (event.RequestType === 'Update') {
        const kept = new Set(wanted.map(keyOf));
        const pools = new Set(wanted.map((e) => e.pool));
        for (const old of entriesOf(event.OldResourceProperties)) {
          if (!kept.has(keyOf(old))) await remove(deps, config, old, log, 'no longer named by the fleet');
          // A pool renamed or removed whose scale set stays: its lease names a session the new pool's listener would meet as a conflict.
          else if (!pools.has(old.pool)) await endLease(deps, config, old, undefined, log);
        }
      }
      return { PhysicalResourceId: SCALE_SET_RESOURCE_ID, Data: ids };
    }
    const verdict = await readDeleteVerdict(
      { aws: deps.aws, cloudformation: deps.cloudformation, log, who: "the scale sets' delete", replaced: 'the scale-set resource', hint: ' Retry the operation', fail: (m) => new Error(m) },
      event.StackId,
    );
    if (verdict.action === 'refuse') throw new Error(`scale sets not deleted: ${verdict.reason}`);
    const config = await deps.loadConfig();
    const stillNamed = verdict.action === 'skip' ? new Set(scaleSetEntries(config).map(keyOf)) : new Set<string>();
    for (const entry of wanted) {
      if (stillNamed.has(keyOf(entry))) log.info('scale set kept: the fleet still names it', { pool: entry.pool, scaleSet: entry.name, reason: verdict.reason });
      else await remove(deps, config, entry, log, verdict.reason);
    }
    return { PhysicalResourceId: event.PhysicalResourceId };
  };
}

/**
 * Every scale-set call is signed with a GitHub App key, so a fleet with a scale set needs its
 * key parameters before its first deploy (docs/operations.md). A missing one fails the event
 * with its name and the command that puts it, before any call to GitHub; the check reads the
 * parameter undecrypted (its existence, never its value). Every App's key is checked: the
 * client may sign with any of them later.
 */
async function requireAppKeys(deps: ScaleSetResourceDeps, config: FleetConfig): Promise<void> {
  const paths = ssmPaths(config.prefix);
  const names = [config.parameters.github.appPrivateKey, ...(config.github?.additionalAppIds ?? []).map((id) => paths.githubAppPrivateKey(id))];
  for (const name of names) {
    try {
      await deps.aws.send(deps.ssm, new GetParameterCommand({ Name: name, WithDecryption: false }), READ);
    } catch (error) {
      if (errorName(error) !== 'ParameterNotFound') throw error;
      throw new Error(
        `SSM parameter ${name} does not exist: a fleet with a runner scale set needs its GitHub App key before the first deploy, since the deploy creates the scale sets at GitHub. ` +
          `Put it, then deploy again: aws ssm put-parameter --type SecureString --name ${name} --value file://<app-private-key>.pem`,
        { cause: error },
      );
    }
  }
}

/** No labels besides the name (ScaleSetEntry): an existing scale set that has others is updated to the name alone. */
async function ensure(deps: ScaleSetResourceDeps, config: FleetConfig, entry: ScaleSetEntry, log: Logger): Promise<number> {
  const api = await deps.scaleSetApiFor(config, scopeOf(entry));
  const { id } = await naming(entry, 'create or update', () => api.ensureScaleSet({ name: entry.name, runnerGroup: entry.runnerGroup, labels: [] }));
  log.info('scale set ensured', { pool: entry.pool, scaleSet: entry.name, runnerGroup: entry.runnerGroup, scaleSetId: id });
  return id;
}

/**
 * Found by name first: a retried Delete, or one whose scale set someone removed by hand,
 * deletes nothing twice. The listener's session is ended before its scale set goes (as ARC
 * removes its listener first; whether GitHub deletes a scale set with an open session is not
 * documented), and the lease item that named it is removed after.
 */
async function remove(deps: ScaleSetResourceDeps, config: FleetConfig, entry: ScaleSetEntry, log: Logger, why: string): Promise<void> {
  const api = await deps.scaleSetApiFor(config, scopeOf(entry));
  const found = await naming(entry, 'delete', () => api.findScaleSet(entry.name, entry.runnerGroup));
  if (found === undefined) {
    log.info('scale set already gone', { pool: entry.pool, scaleSet: entry.name });
    return;
  }
  await endLease(deps, config, entry, found.id, log);
  await naming(entry, 'delete', () => api.deleteScaleSet(found.id));
  log.info('scale set deleted', { pool: entry.pool, scaleSet: entry.name, scaleSetId: found.id, reason: why });
}

/**
 * Ends the session the pool's lease item names and deletes the item. Only an item naming
 * `scaleSetId` (any, when undefined) is touched: an item the listener has since written for
 * another scale set of the pool (a renamed scale set's new one) is its. The delete carries
 * the same condition, and the session id read: a listener that recorded a new session while
 * the old one was being ended fails it, and the item is read again and its new session ended
 * too (once: a listener still running keeps its item). Resent after a lost answer, the delete
 * finds no item and passes.
 */
async function endLease(deps: ScaleSetResourceDeps, config: FleetConfig, entry: ScaleSetEntry, scaleSetId: number | undefined, log: Logger, again = true): Promise<void> {
  const A = SCALE_SET_LEASE_ATTRIBUTES;
  const Key = { [JOB_RECORD_ATTRIBUTES.key]: { S: scaleSetLeaseKey(entry.pool) } };
  const out = await deps.aws.send<GetItemCommandOutput>(deps.dynamodb, new GetItemCommand({ TableName: deps.tableName, Key, ConsistentRead: true }), READ);
  const leaseScaleSet = out.Item?.[A.scaleSetId]?.N;
  if (out.Item === undefined || (scaleSetId !== undefined && leaseScaleSet !== undefined && Number(leaseScaleSet) !== scaleSetId)) return;
  const sessionId = out.Item[A.sessionId]?.S;
  if (sessionId !== undefined && leaseScaleSet !== undefined) {
    const api = await deps.scaleSetApiFor(config, scopeOf(entry));
    await naming(entry, 'end the session of', () => api.deleteSession(Number(leaseScaleSet), sessionId));
    log.info('scale set session ended', { pool: entry.pool, scaleSet: entry.name, scaleSetId: Number(leaseScaleSet), sessionId });
  }
  try {
    await deps.aws.send(
      deps.dynamodb,
      new DeleteItemCommand({
        TableName: deps.tableName,
        Key,
        ConditionExpression: `(${leaseScaleSet === undefined ? 'attribute_not_exists(#id)' : 'attribute_not_exists(#id) OR #id = :id'}) AND (${sessionId === undefined ? 'attribute_not_exists(#session)' : 'attribute_not_exists(#session) OR #session = :session'})`,
        ExpressionAttributeNames: { '#id': A.scaleSetId, '#session': A.sessionId },
        ...(leaseScaleSet === undefined && sessionId === undefined
          ? {}
          : { ExpressionAttributeValues: { ...(leaseScaleSet === undefined ? {} : { ':id': { N: leaseScaleSet } }), ...(sessionId === undefined ? {} : { ':session': { S: sessionId } }) } }),
      }),
      WRITE_IDEMPOTENT,
    );
    log.info('scale set lease removed', { pool: entry.pool, scaleSet: entry.name });
  } catch (error) {
    if (errorName(error) !== 'ConditionalCheckFailedException') throw error;
    if (again) {
      log.info('the listener wrote the scale set lease meanwhile: reading it again', { pool: entry.pool, scaleSet: entry.name });
      await endLease(deps, config, entry, scaleSetId, log, false);
      return;
    }
    log.info('scale set lease kept: the listener wrote it meanwhile', { pool: entry.pool, scaleSet: entry.name });
  }
}

/** CloudFormation shows the event's error alone: it names the pool and the scale set a failed call was for. */
async function naming<T>(entry: ScaleSetEntry, what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    const where = entry.organization !== undefined ? `organisation ${entry.organization}` : `repository ${entry.repository}`;
    throw new Error(`pool "${entry.pool}": could not ${what} scale set "${entry.name}" (runner group "${entry.runnerGroup}", ${where}): ${(error as Error).message}`, { cause: error });
  }
}

function scopeOf(entry: ScaleSetEntry): ScaleSetScope {
  return entry.organization !== undefined ? { organization: entry.organization } : { repository: entry.repository! };
}
