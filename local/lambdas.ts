import { CloudWatchLogsClient } from '@aws-sdk/client-cloudwatch-logs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { EC2Client } from '@aws-sdk/client-ec2';
import {
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SQSClient,
  type Message,
  type MessageAttributeValue,
} from '@aws-sdk/client-sqs';
import { PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import type { APIGatewayProxyStructuredResultV2, SQSEvent, SQSRecord } from 'aws-lambda';
import { createCiProviders } from '../lambdas/ci';
import { createPoolHandler, type PoolRunSummary } from '../lambdas/pool/handler';
import { createScaleDownHandler, type SweepSummary } from '../lambdas/scale-down/handler';
import { createRunnerReleaseHandler } from '../lambdas/runner-release/handler';
import { createReconcileHandler, RECONCILED_MESSAGE, type ReconcileDeps } from '../lambdas/reconcile/handler';
import { createScaleUpHandler } from '../lambdas/scale-up/handler';
import { createScaleSetDemandHandler } from '../lambdas/scale-up/scale-set-handler';
import { productionScaleSetApis } from '../lambdas/scale-set-listener/api';
import { createListenerHandler, LISTENER_DEADLINE_RESERVE_MS } from '../lambdas/scale-set-listener/handler';
import { DynamoScaleSetLeases, type ScaleSetLeases } from '../lambdas/scale-set-listener/lease';
import { DynamoJobRecords } from '../lambdas/scale-up/job-record';
import { RETRY_STARTED_MESSAGE } from '../lambdas/scale-up/retry-check';
import { AwsCaller } from '../lambdas/shared/aws-call';
import { DynamoLaunchTickets } from '../lambdas/shared/launch-tickets';
import { providersOnce } from '../lambdas/shared/clients';
import { JOB_RECORD_ATTRIBUTES, LAMBDA_ENV, LAUNCH_TICKET_KEY_PREFIX, LEDGER_MESSAGE, parseJobMessage, QueueTokenExpiredError, ssmPaths, type FleetConfig, type JobRetryOptions, type PoolConfig, type Provider, type RunnerReleaseSources, type ScaleSetApi, type ScaleSetDemand, type ScaleSetDemandResult } from '../lambdas/shared/contract';
import { loadFleetConfig } from '../lambdas/shared/fleet-config-source';
import { createLogger, type Sink } from '../lambdas/shared/log';
import { Pacer } from '../lambdas/shared/pacing';
import { createWebhookHandler } from '../lambdas/webhook/handler';
import { functionUrlEvent, type Delivery } from './deliveries';
import type { EventSink, LocalEvent } from './events';

/**
 * The four Lambdas run in this process, built as their `lambdas/<name>/index.ts` entry
 * points build them (same factories, same AwsCaller with its own Pacer per function, the
 * FleetConfig read from its SSM parameter), except that each function's AWS clients point
 * at moto and its log lines go to a sink that also turns the lines into timeline events.
 * Each function has clients of its own, as separate Lambdas would: a fault added to
 * scale-up's EC2 client touches nothing else.
 *
 * Triggers, as AWS would fire them:
 * - webhook: a Function URL event (payload format 2.0) per delivery;
 * - scale-up: an SQS event source mapping on the jobs queue: batches of up to 10 messages,
 *   ReportBatchItemFailures (the messages not reported failed are deleted, the others
 *   reappear after the queue's visibility timeout, and moto's redrive policy moves a
 *   message to the dead-letter queue once it was received maxReceiveCount times);
 * - pool and scale-down: schedule ticks (every minute when deployed; every second or two here).
 */

export interface LocalAwsClients {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly sqs: SQSClient;
  /** The boot scripts ship their log here; the report reads it back. */
  readonly logs: CloudWatchLogsClient;
}

/** Like `productionClients()` (maxAttempts 1, bounded sockets) but pointed at `endpoint` with dummy credentials. */
export function localClients(endpoint: string, maxAttempts: { ec2?: number; ssm?: number; sqs?: number } = {}): LocalAwsClients {
  const common = {
    endpoint,
    region: LOCAL_REGION,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    requestHandler: { connectionTimeout: 2_000, requestTimeout: 8_000 },
  };
  return {
    ec2: new EC2Client({ ...common, maxAttempts: maxAttempts.ec2 ?? 1 }),
    ssm: new SSMClient({ ...common, maxAttempts: maxAttempts.ssm ?? 1 }),
    sqs: new SQSClient({ ...common, maxAttempts: maxAttempts.sqs ?? 1 }),
    logs: new CloudWatchLogsClient({ ...common, maxAttempts: 2 }),
  };
}

/** DynamoDB on moto, as scale-up's index.ts builds its client (one attempt: AwsCaller retries). */
export function localDynamo(endpoint: string): DynamoDBClient {
  return new DynamoDBClient({ endpoint, region: LOCAL_REGION, credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1, requestHandler: { connectionTimeout: 2_000, requestTimeout: 8_000 } });
}

export const LOCAL_REGION = 'us-east-1';
/** moto's account id. */
export const LOCAL_ACCOUNT = '123456789012';

export interface LocalLambdasOptions {
  readonly endpoint: string;
  readonly fleetConfigParameter: string;
  readonly queueUrl: string;
  readonly deadLetterQueueUrl: string;
  /** `arn:aws:ec2:<region>:<account>:instance/` (moto's account). */
  readonly instanceArnPrefix: string;
  readonly onEvent: EventSink;
  /** Every log and EMF line of every function, raw (for --verbose and for tests). */
  readonly onLogLine?: (fn: LambdaName, line: string) => void;
  /** Local override of the sweep's grace period (seconds; deployed: 10 minutes). */
  readonly sweepGraceSeconds: number;
  /** Schedule periods (deployed: one minute each). */
  readonly poolEveryMs?: number;
  readonly scaleDownEveryMs?: number;
  /** The event source mapping's long poll (seconds). */
  readonly pollWaitSeconds?: number;
  /**
   * The per-job record table (DynamoDB on moto, created as lib/job-records.ts does). The pool
   * and scale-up always take their launch tickets there, as deployed (lambdas/pool/index.ts,
   * lambdas/scale-up/index.ts): every launch of an unproven or failing template takes one.
   */
  readonly jobRecordTable: string;
  /**
   * The retry bound scale-up judges by: with it scale-up also admits each job by its record
   * and retries a job whose runner went elsewhere, as deployed. Without it, as before issue 11
   * (a retry check would keep its message in the queue for the deployed 5 minutes).
   */
  readonly jobRetry?: JobRetryOptions;
  /** The reconciler on its schedule (deployed: every 5 minutes); absent: no reconciler runs. */
  readonly reconcile?: { readonly everyMs: number; readonly options: NonNullable<ReconcileDeps['options']> };
  /** The release resolver on its schedule (deployed: hourly), reading the loopback release data; absent: it does not run. */
  readonly runnerRelease?: { readonly everyMs: number; readonly sources: RunnerReleaseSources };
  /**
   * The scale-set listener on its schedule (deployed: every minute, a 300 s timeout, a 115 s
   * margin after a 5 s reserve): each tick starts an invocation that runs as long as `invocationMs` ("timeout")
   * allows, beside those still running, as EventBridge does. Absent: it does not run.
   */
  readonly scaleSetListener?: ListenerSchedule;
}

export interface ListenerSchedule {
  readonly everyMs: number;
  readonly invocationMs: number;
  readonly marginMs: number;
}

/** How long a listener invocation holds the lease before it releases: its "timeout" less its margin. */
export function listenerHandOverMs(o: ListenerSchedule): number {
  return o.invocationMs - o.marginMs;
}

export type LambdaName = 'webhook' | 'scale-up' | 'pool' | 'scale-down' | 'reconcile' | 'runner-release' | 'scale-set-listener';

/** One invocation of the scale-set listener. */
export interface ListenerInvocation {
  readonly id: string;
  readonly startedAt: number;
  /** Stopped dead (the fault): none of its calls answers it any more, it releases nothing. */
  killed: boolean;
  /** Per pool, how its poll ended (set when the invocation returned). */
  outcome?: Record<string, string>;
  /** When it called the message queue (GetMessage, DeleteMessage), and when its writes on the lease it held (renew, record) were answered and how (epoch ms). */
  readonly queueCalls: number[];
  readonly leaseWrites: { readonly at: number; readonly outcome: string }[];
  /** Its demands (the synchronous invocations of scale-up): when each was sent and when scale-up answered it, even after the invocation was killed (epoch ms). */
  readonly demands: ListenerDemand[];
  /** Its renewals of the lease sent and not yet answered (`outsideDemands`). */
  renewing: number;
  /** When the message queue refused its queue token (401: `QueueTokenExpiredError`), and when a session refresh of its succeeded (epoch ms). */
  readonly tokenRefusals: number[];
  readonly refreshes: number[];
}

/** One demand of a listener invocation: scale-up runs from `sentAt` until `answeredAt` (absent: still running). */
export interface ListenerDemand {
  readonly pool: string;
  readonly sentAt: number;
  answeredAt?: number;
}

/** One holding of a scale-set lease as the table's answered writes show it (epoch ms). */
export interface RecordedLeaseHolding {
  readonly pool: string;
  readonly holder: string;
  readonly acquiredAt: number;
  expiresAt: number;
  releasedAt?: number;
  /** The expiry each answered write set, from when it was answered: the acquire's, each renewal's, a release's hold. */
  readonly terms: { readonly from: number; readonly expiresAt: number }[];
}

/**
 * The listener's leases (the real DynamoDB ones on moto), each taking and giving back recorded:
 * the proof's "at most one holder at any moment" is read off these.
 */
export class RecordedLeases implements ScaleSetLeases {
  readonly holdings: RecordedLeaseHolding[] = [];
  constructor(private readonly inner: ScaleSetLeases) {}

  async acquire(...args: Parameters<ScaleSetLeases['acquire']>) {
    const [pool, holder] = args;
    const out = await this.inner.acquire(...args);
    if (out.kind === 'acquired') {
      const at = Date.now();
      this.holdings.push({ pool, holder, acquiredAt: at, expiresAt: out.lease.expiresAt * 1000, terms: [{ from: at, expiresAt: out.lease.expiresAt * 1000 }] });
    }
    return out;
  }

  /** A renewal moves the holding's expiry on (the item's, in whole seconds). */
  async renew(...args: Parameters<ScaleSetLeases['renew']>) {
    const [lease, expiresAt] = args;
    const out = await this.inner.renew(...args);
    const holding = this.current(lease);
    if (holding && out === 'done') {
      holding.expiresAt = Math.floor(expiresAt.getTime() / 1000) * 1000;
      holding.terms.push({ from: Date.now(), expiresAt: holding.expiresAt });
    }
    return out;
  }

  record(...args: Parameters<ScaleSetLeases['record']>) {
    return this.inner.record(...args);
  }

  /** Given back when it was asked to be; with `holdUntil` kept until then (the item's expiry). */
  async release(...args: Parameters<ScaleSetLeases['release']>) {
    const [lease, , holdUntil] = args;
    const holding = this.current(lease);
    const at = Date.now();
    const out = await this.inner.release(...args);
    if (holding && out === 'done') {
      if (holdUntil === undefined) holding.releasedAt = at;
      else {
        holding.expiresAt = Math.floor(holdUntil.getTime() / 1000) * 1000;
        holding.terms.push({ from: Date.now(), expiresAt: holding.expiresAt });
      }
    }
    return out;
  }

  private current(lease: { readonly pool: string; readonly holder: string }): RecordedLeaseHolding | undefined {
    return this.holdings.findLast((h) => h.pool === lease.pool && h.holder === lease.holder && h.releasedAt === undefined);
  }

  /** The holder of a pool's lease now, by the record (a killed holder holds until its expiry). */
  holderOf(pool: string, now = Date.now()): string | undefined {
    return this.holdings.findLast((h) => h.pool === pool && h.releasedAt === undefined && h.expiresAt > now)?.holder;
  }
}
/** The functions that take launch tickets. */
export type TicketFunction = 'pool' | 'scale-up';
export interface TicketCounts {
  readonly taken: Record<TicketFunction, number>;
  readonly released: Record<TicketFunction, number>;
}

/** Log messages that name a fact the timeline shows. */
const LOG_FACTS = {
  queued: 'job queued',
  warmStarted: 'warm activation started the instance',
  coldStarted: 'cold launch started an instance',
  deadLettered: 'job dead-lettered',
  reconciled: RECONCILED_MESSAGE,
  retried: RETRY_STARTED_MESSAGE,
} as const;

/**
 * Scale-up's line for a job its pool's prime back-off holds (lambdas/scale-up/handler.ts: "the
 * pool's prime back-off holds cold launches (backoff), job waits"). Matched loosely, so that a
 * reworded reason (the back-off is still being refined) is still seen as a hold.
 */
const HELD_BY_BACKOFF = /prime back-off.*\bholds?\b.*\bwaits?\b/i;

export class LocalLambdas {
  /** Scale-up's own clients: faults are added to these. */
  readonly scaleUpClients: LocalAwsClients;
  readonly webhook: (delivery: Delivery) => Promise<APIGatewayProxyStructuredResultV2>;
  private readonly scaleUp: (event: SQSEvent) => Promise<{ batchItemFailures: { itemIdentifier: string }[] }>;
  private readonly pool: () => Promise<PoolRunSummary[]>;
  private readonly scaleDown: () => Promise<SweepSummary>;
  private readonly reconcile: (() => Promise<unknown>) | undefined;
  /** Scale-up's handler for the listener's synchronous invocation (same clients and providers as its queue handler). */
  readonly scaleSetDemand: (demand: ScaleSetDemand) => Promise<ScaleSetDemandResult>;
  /** The listener's leases, recorded; undefined without the listener. */
  readonly leases: RecordedLeases | undefined;
  readonly listenerInvocations: ListenerInvocation[] = [];
  private readonly listenerRuns: Promise<void>[] = [];
  private listenerInvoke: ((inv: ListenerInvocation, abort: AbortSignal) => Promise<Record<string, string>>) | undefined;
  private readonly listenerAborts = new Map<string, AbortController>();
  /** Per invocation, what its renewals wait for while `outsideDemands` runs. */
  private readonly renewalGates = new Map<string, Promise<void>>();
  private readonly esmClient: SQSClient;
  private running = false;
  private loops: Promise<void>[] = [];
  private wake: (() => void) | undefined;
  private nextSkewMs = 0;
  private skewMs = 0;
  readonly counters = { scaleUpInvocations: 0, messagesReceived: 0, messagesFailed: 0, poolRuns: 0, sweeps: 0, reconcileRuns: 0, runnerReleaseRuns: 0 };
  /** Launch tickets whose write or delete DynamoDB answered, per function (an unanswered one is not counted). */
  readonly tickets: TicketCounts = { taken: { pool: 0, 'scale-up': 0 }, released: { pool: 0, 'scale-up': 0 } };
  /** Distinct queue messages received per qualified job id (a message that reappears keeps its id). */
  private readonly messagesOfJob = new Map<string, Set<string>>();

  constructor(private readonly options: LocalLambdasOptions) {
    const env = { [LAMBDA_ENV.fleetConfigParameter]: options.fleetConfigParameter, [LAMBDA_ENV.jobsQueueUrl]: options.queueUrl };
    const loadConfig = (ssm: SSMClient) => () => loadFleetConfig(ssm, env);

    // The deployed webhook's clients retry a little themselves (lambdas/webhook/index.ts).
    const webhookClients = localClients(options.endpoint, { ssm: 2, sqs: 3 });
    const webhookSink = this.sink('webhook');
    const webhook = createWebhookHandler({
      ssm: webhookClients.ssm,
      sqs: webhookClients.sqs,
      env,
      logger: createLogger({ fn: 'webhook' }, webhookSink),
      metricSink: webhookSink,
    });
    this.webhook = async (delivery) => (await webhook(functionUrlEvent(delivery))) as APIGatewayProxyStructuredResultV2;

    this.scaleUpClients = localClients(options.endpoint);
    this.observeClaims(this.scaleUpClients.ssm);
    const scaleUpSsm = this.scaleUpClients.ssm;
    const scaleUpAws = new AwsCaller({ pacer: new Pacer() });
    // One DynamoDB client for the records and the tickets, as scale-up's index.ts builds them.
    const scaleUpDynamo = this.observeTickets('scale-up', localDynamo(options.endpoint));
    const retry = options.jobRetry;
    const scaleUpDeps = {
      ...this.scaleUpClients,
      aws: scaleUpAws,
      launchTickets: new DynamoLaunchTickets(scaleUpAws, scaleUpDynamo, options.jobRecordTable),
      loadConfig: loadConfig(scaleUpSsm),
      providers: providersOnce((config) => createCiProviders(config, { ssm: scaleUpSsm, metricSink: this.sink('scale-up') })),
      queueUrl: options.queueUrl,
      deadLetterQueueUrl: options.deadLetterQueueUrl,
      instanceArnPrefix: options.instanceArnPrefix,
      sink: this.sink('scale-up'),
    };
    this.scaleUp = createScaleUpHandler({ ...scaleUpDeps, ...(retry ? { jobRecords: new DynamoJobRecords(scaleUpAws, scaleUpDynamo, options.jobRecordTable), options: { retry } } : {}) });
    // One Lambda, two entry points (lambdas/scale-up/index.ts): the demand shares the container's clients and providers.
    this.scaleSetDemand = createScaleSetDemandHandler({ ...scaleUpDeps, scaleSetApi: productionScaleSetApis(scaleUpDeps.providers) });
    this.leases = options.scaleSetListener ? this.listener(options.scaleSetListener, loadConfig) : undefined;

    const poolClients = localClients(options.endpoint);
    const poolAws = new AwsCaller({ pacer: new Pacer() });
    this.pool = createPoolHandler({
      ec2: poolClients.ec2,
      ssm: poolClients.ssm,
      aws: poolAws,
      loadConfig: loadConfig(poolClients.ssm),
      launchTickets: new DynamoLaunchTickets(poolAws, this.observeTickets('pool', localDynamo(options.endpoint)), options.jobRecordTable),
      now: () => new Date(Date.now() + this.skewMs),
      sink: this.sink('pool'),
    });

    const downClients = localClients(options.endpoint);
    const truncatedLists = new Set<Provider>();
    this.scaleDown = createScaleDownHandler({
      ec2: downClients.ec2,
      ssm: downClients.ssm,
      aws: new AwsCaller({ pacer: new Pacer() }),
      loadConfig: loadConfig(downClients.ssm),
      providers: providersOnce((config) =>
        createCiProviders(config, { ssm: downClients.ssm, metricSink: this.sink('scale-down'), onListTruncated: (provider) => truncatedLists.add(provider) }),
      ),
      truncatedLists,
      sink: this.sink('scale-down'),
      options: { graceSeconds: options.sweepGraceSeconds },
    });
    this.esmClient = localClients(options.endpoint).sqs;
    this.reconcile = options.reconcile ? this.reconciler(options.reconcile.options) : undefined;
  }

  /**
   * The listener as lambdas/scale-set-listener/index.ts builds it (its own clients on moto, its
   * own GitHub providers, the leases in the job-record table), scale-up invoked in-process. Each
   * invocation gets its own view of the scale-set client, the leases and scale-up, so that it can
   * be stopped dead (`killListener`): from then on none of its calls answers it, as a process
   * that died would see none, and its open long poll is cut.
   */
  private listener(o: NonNullable<LocalLambdasOptions['scaleSetListener']>, loadConfig: (ssm: SSMClient) => () => Promise<FleetConfig>): RecordedLeases {
    const clients = localClients(this.options.endpoint);
    const aws = new AwsCaller({ pacer: new Pacer() });
    const sink = this.sink('scale-set-listener');
    const apis = productionScaleSetApis(providersOnce((config) => createCiProviders(config, { ssm: clients.ssm, metricSink: sink })));
    const leases = new RecordedLeases(new DynamoScaleSetLeases(aws, localDynamo(this.options.endpoint), this.options.jobRecordTable));
    const config = loadConfig(clients.ssm);
    this.listenerInvoke = (inv, abort) => {
      const never = new Promise<never>(() => undefined);
      const guard = <T>(call: () => Promise<T>): Promise<T> =>
        inv.killed
          ? never
          : call().then(
              (v) => (inv.killed ? never : v),
              (e: unknown) => (inv.killed ? never : Promise.reject(e)),
            );
      const refusals = <T>(p: Promise<T>): Promise<T> =>
        p.catch((e: unknown) => {
          if (e instanceof QueueTokenExpiredError) inv.tokenRefusals.push(Date.now());
          throw e;
        });
      const guardedApi = (api: ScaleSetApi): ScaleSetApi => ({
        ensureScaleSet: (spec) => guard(() => api.ensureScaleSet(spec)),
        findScaleSet: (name, group) => guard(() => api.findScaleSet(name, group)),
        deleteScaleSet: (id) => guard(() => api.deleteScaleSet(id)),
        createSession: (id, owner) => guard(() => api.createSession(id, owner)),
        refreshSession: (id, session) =>
          guard(() => api.refreshSession(id, session)).then((v) => {
            inv.refreshes.push(Date.now());
            return v;
          }),
        deleteSession: (id, session) => guard(() => api.deleteSession(id, session)),
        getMessage: (session, last, max, signal) => {
          inv.queueCalls.push(Date.now());
          return refusals(guard(() => api.getMessage(session, last, max, signal ? AbortSignal.any([signal, abort]) : abort)));
        },
        deleteMessage: (session, id) => {
          inv.queueCalls.push(Date.now());
          return refusals(guard(() => api.deleteMessage(session, id)));
        },
        generateJitConfig: (id, name) => guard(() => api.generateJitConfig(id, name)),
      });
      const written = <T>(out: T): T => {
        inv.leaseWrites.push({ at: Date.now(), outcome: typeof out === 'string' ? out : 'failed' });
        return out;
      };
      const handler = createListenerHandler({
        ec2: clients.ec2,
        aws,
        loadConfig: config,
        scaleSetApi: (c: FleetConfig, pool: PoolConfig) => guardedApi(apis(c, pool)),
        leases: {
          acquire: (...a) => guard(() => leases.acquire(...a)),
          renew: (...a) =>
            (this.renewalGates.get(inv.id) ?? Promise.resolve())
              .then(() =>
                guard(() => {
                  inv.renewing++;
                  return leases.renew(...a).finally(() => inv.renewing--);
                }),
              )
              .then(written),
          record: (...a) => guard(() => leases.record(...a)).then(written),
          release: (...a) => guard(() => leases.release(...a)),
        },
        // Recorded from the call to scale-up's answer, which a killed invocation never sees but
        // which still runs: the proof checks each lies within its invocation's holding of the lease.
        requestCapacity: (d) =>
          guard(() => {
            const demand: ListenerDemand = { pool: d.pool, sentAt: Date.now() };
            inv.demands.push(demand);
            return this.scaleSetDemand(d).finally(() => {
              demand.answeredAt = Date.now();
            });
          }),
        sink,
        options: { marginMs: o.marginMs },
      });
      // The handler keeps its flush reserve (not scaled) after the "timeout": its deadline is
      // `invocationMs` on, and it polls for `invocationMs - marginMs`, as `listenerHandOverMs` says.
      return handler({}, { awsRequestId: inv.id, getRemainingTimeInMillis: () => o.invocationMs + LISTENER_DEADLINE_RESERVE_MS });
    };
    return leases;
  }

  /** One scheduled (or extra) invocation of the listener, not awaited: it runs beside the others. */
  invokeListener(): ListenerInvocation | undefined {
    if (!this.listenerInvoke) return undefined;
    const inv: ListenerInvocation = { id: `listener-${this.listenerInvocations.length + 1}`, startedAt: Date.now(), killed: false, queueCalls: [], leaseWrites: [], demands: [], renewing: 0, tokenRefusals: [], refreshes: [] };
    this.listenerInvocations.push(inv);
    const abort = new AbortController();
    this.listenerAborts.set(inv.id, abort);
    const run = this.listenerInvoke(inv, abort.signal).then(
      (outcome) => {
        inv.outcome = outcome;
      },
      (error: unknown) => {
        this.options.onLogLine?.('scale-set-listener', JSON.stringify({ level: 'error', fn: 'scale-set-listener', message: 'invocation failed', error: (error as Error).message }));
      },
    );
    // A killed invocation never returns: stop() waits only for the live ones.
    this.listenerRuns.push(Promise.race([run, new Promise<void>((resolve) => abort.signal.addEventListener('abort', () => resolve()))]));
    return inv;
  }

  /**
   * Runs `act` (the lease-taken-over fault's take) while the invocation is outside its demands:
   * its renewals wait meanwhile, and `act` runs once none of its renewals or demands is in
   * flight (or it has ended). Every demand follows its own renewal, so a take-over landing
   * between the two would displace the holder mid-demand: the clock skew's limit, which that
   * fault does not test, and which the proof's demands-within-the-lease check would report.
   */
  async outsideDemands<T>(id: string, act: () => Promise<T>): Promise<T> {
    const inv = this.listenerInvocations.find((i) => i.id === id);
    let open = () => {};
    this.renewalGates.set(id, new Promise<void>((resolve) => (open = resolve)));
    try {
      while (inv && !inv.killed && !inv.outcome && (inv.renewing > 0 || inv.demands.some((d) => d.answeredAt === undefined))) await new Promise((resolve) => setTimeout(resolve, 20));
      return await act();
    } finally {
      this.renewalGates.delete(id);
      open();
    }
  }

  /** Stops an invocation dead (the poller killed mid-poll): no release, no acknowledgement, its long poll cut. */
  killListener(id: string): boolean {
    const inv = this.listenerInvocations.find((i) => i.id === id);
    if (!inv || inv.killed || inv.outcome) return false;
    inv.killed = true;
    this.listenerAborts.get(id)?.abort();
    return true;
  }

  /** The reconciler as lambdas/reconcile/index.ts builds it, its clients on moto, its CI calls to the loopback servers. */
  private reconciler(reconcileOptions: NonNullable<ReconcileDeps['options']>): () => Promise<unknown> {
    const clients = localClients(this.options.endpoint);
    const sink = this.sink('reconcile');
    const run = createReconcileHandler({
      sqs: clients.sqs,
      aws: new AwsCaller({ pacer: new Pacer() }),
      loadConfig: () => loadFleetConfig(clients.ssm, { [LAMBDA_ENV.fleetConfigParameter]: this.options.fleetConfigParameter }),
      providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm, metricSink: sink })),
      queueUrl: this.options.queueUrl,
      sink,
      options: reconcileOptions,
    });
    return () => run();
  }

  /** One run of the release resolver, as lambdas/runner-release/index.ts builds it, its SSM on moto. */
  async tickRunnerRelease(): Promise<unknown> {
    const o = this.options.runnerRelease;
    if (!o) return undefined;
    const clients = localClients(this.options.endpoint);
    this.counters.runnerReleaseRuns++;
    return createRunnerReleaseHandler({
      ssm: clients.ssm,
      aws: new AwsCaller(),
      loadConfig: () => loadFleetConfig(clients.ssm, { [LAMBDA_ENV.fleetConfigParameter]: this.options.fleetConfigParameter }),
      sources: o.sources,
      sink: this.sink('runner-release'),
    })();
  }

  async tickReconcile(): Promise<unknown> {
    this.counters.reconcileRuns++;
    return this.reconcile?.();
  }

  /**
   * How many distinct messages the queue delivered per job (qualified job id): what shows that
   * the FIFO queue dropped a redelivery by its deduplication id (scale-up's own duplicate
   * check would hide it otherwise).
   */
  queueMessagesPerJob(): Record<string, number> {
    return Object.fromEntries([...this.messagesOfJob].map(([job, ids]) => [job, ids.size]));
  }

  /** One receive of the event source mapping and one scale-up invocation; returns the batch size. */
  async pollQueue(waitSeconds = this.options.pollWaitSeconds ?? 1): Promise<number> {
    const out = await this.esmClient.send(
      new ReceiveMessageCommand({
        QueueUrl: this.options.queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: waitSeconds,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) return 0;
    this.counters.scaleUpInvocations++;
    this.counters.messagesReceived += messages.length;
    for (const m of messages) {
      let jobId: string;
      try {
        jobId = parseJobMessage(m.Body ?? '').jobId;
      } catch {
        jobId = 'malformed';
      }
      const ids = this.messagesOfJob.get(jobId) ?? new Set<string>();
      ids.add(m.MessageId!);
      this.messagesOfJob.set(jobId, ids);
    }
    let failed: Set<string>;
    try {
      const res = await this.scaleUp({ Records: messages.map((m) => toRecord(m, this.options.queueUrl)) });
      failed = new Set(res.batchItemFailures.map((f) => f.itemIdentifier));
    } catch (error) {
      // A thrown invocation fails the whole batch: every message reappears after the visibility timeout.
      this.options.onLogLine?.('scale-up', JSON.stringify({ level: 'error', message: 'invocation failed', error: (error as Error).message }));
      failed = new Set(messages.map((m) => m.MessageId!));
    }
    this.counters.messagesFailed += failed.size;
    const done = messages.filter((m) => !failed.has(m.MessageId!));
    if (done.length > 0) {
      await this.esmClient.send(
        new DeleteMessageBatchCommand({ QueueUrl: this.options.queueUrl, Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }),
      );
    }
    return messages.length;
  }

  async tickPool(): Promise<PoolRunSummary[]> {
    this.counters.poolRuns++;
    this.skewMs = this.nextSkewMs;
    this.nextSkewMs = 0;
    try {
      return await this.pool();
    } finally {
      this.skewMs = 0;
    }
  }

  /**
   * The next pool run sees the clock `ms` ahead (one run only): the never-priming fault
   * fast-forwards past the pool's priming timeout (at least a minute) instead of waiting it out.
   */
  skewNextPoolRun(ms: number): void {
    this.nextSkewMs = ms;
  }

  async tickScaleDown(): Promise<SweepSummary> {
    this.counters.sweeps++;
    return this.scaleDown();
  }

  /** Starts the triggers: the event source mapping and the two schedules. */
  start(): void {
    if (this.running) return;
    this.running = true;
    const loop = async (name: LambdaName, run: () => Promise<unknown>, everyMs: number) => {
      while (this.running) {
        try {
          await run();
        } catch (error) {
          this.options.onLogLine?.(name, JSON.stringify({ level: 'error', fn: name, message: 'invocation failed', error: (error as Error).message }));
        }
        if (everyMs > 0 && this.running) await this.sleep(everyMs);
      }
    };
    this.loops = [
      loop('scale-up', () => this.pollQueue(), 0),
      loop('pool', () => this.tickPool(), this.options.poolEveryMs ?? 1_000),
      loop('scale-down', () => this.tickScaleDown(), this.options.scaleDownEveryMs ?? 2_000),
      ...(this.options.reconcile ? [loop('reconcile', () => this.tickReconcile(), this.options.reconcile.everyMs)] : []),
      ...(this.options.runnerRelease ? [loop('runner-release', () => this.tickRunnerRelease(), this.options.runnerRelease.everyMs)] : []),
      ...(this.options.scaleSetListener ? [loop('scale-set-listener', async () => this.invokeListener(), this.options.scaleSetListener.everyMs)] : []),
    ];
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await Promise.all(this.loops);
    this.loops = [];
    // No more ticks: the live listener invocations run to their deadline, release their lease
    // and leave the session open, as at the end of their time.
    await Promise.all(this.listenerRuns);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      const previous = this.wake;
      this.wake = () => {
        clearTimeout(timer);
        resolve();
        previous?.();
      };
    });
  }

  /** A function's log sink: the raw line goes on, the facts become timeline events. */
  private sink(fn: LambdaName): Sink {
    return (line) => {
      this.options.onLogLine?.(fn, line);
      const event = eventOfLogLine(fn, line);
      for (const e of event) this.options.onEvent(e);
    };
  }

  /**
   * The claim is the config write that refuses to overwrite (scale-up/claim.ts: a parked
   * instance's; cold.ts: the new instance's, right after CreateFleet); scale-up logs nothing
   * when it succeeds, so the moment is read off its SSM client instead.
   */
  private observeClaims(ssm: SSMClient): void {
    ssm.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        if (context.commandName === 'PutParameterCommand') {
          const input = args.input as PutParameterCommand['input'];
          const root = this.runnerConfigRoot();
          if (input.Overwrite === false && root && input.Name?.startsWith(root)) {
            this.options.onEvent({ t: Date.now(), kind: 'claimed', instanceId: input.Name.slice(root.length) });
          }
        }
        return out;
      },
      { step: 'initialize', name: 'local-observe-claims' },
    );
  }

  /**
   * Counts the launch tickets a function's DynamoDB client took (UpdateItem) and gave back
   * (DeleteItem) with an answer: the tickets log nothing when they succeed, so the report reads
   * their use off the client, as the claims are read off scale-up's SSM client.
   */
  private observeTickets(fn: TicketFunction, dynamo: DynamoDBClient): DynamoDBClient {
    dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        const key = (args.input as { Key?: Record<string, { S?: string }> }).Key?.[JOB_RECORD_ATTRIBUTES.key]?.S;
        if (key?.startsWith(LAUNCH_TICKET_KEY_PREFIX)) {
          if (context.commandName === 'UpdateItemCommand') this.tickets.taken[fn]++;
          if (context.commandName === 'DeleteItemCommand') this.tickets.released[fn]++;
        }
        return out;
      },
      { step: 'initialize', name: 'local-observe-tickets' },
    );
    return dynamo;
  }

  private root: string | undefined;
  private runnerConfigRoot(): string | undefined {
    if (this.root === undefined) {
      // "/<prefix>/fleet/config" → the prefix → its runner config root.
      const prefix = /^\/([^/]+)\//.exec(this.options.fleetConfigParameter)?.[1];
      if (prefix) this.root = ssmPaths(prefix).runnerConfigRoot;
    }
    return this.root;
  }
}

/** The timeline events a handler's log line states (pure; tested). */
export function eventOfLogLine(fn: LambdaName, line: string, t = Date.now()): LocalEvent[] {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return [];
  }
  const str = (k: string) => (typeof entry[k] === 'string' ? (entry[k] as string) : undefined);
  const message = str('message');
  const traceId = str('traceId');
  const jobId = str('jobId');
  const at = Date.parse(str('time') ?? '') || t;
  const job = jobId ? splitJobId(jobId) : {};
  const base = { t: at, ...(traceId ? { traceId } : {}), ...job, ...(str('pool') ? { pool: str('pool')! } : {}) };
  if (message === LEDGER_MESSAGE && str('stage') && typeof entry.seconds === 'number') {
    return [{ ...base, t: Date.parse(str('at') ?? '') || at, kind: 'stage', detail: str('stage')!, seconds: entry.seconds }];
  }
  if (fn === 'webhook' && message === LOG_FACTS.queued) return [{ ...base, kind: 'queued' }];
  if (fn === 'reconcile' && message === LOG_FACTS.reconciled) return [{ ...base, kind: 'queued', detail: 'reconciler' }];
  if (fn !== 'scale-up') return [];
  if (message === LOG_FACTS.retried) return [{ ...base, kind: 'retried', ...(typeof entry.attempt === 'number' ? { detail: entry.attempt } : {}) }];
  const instanceId = str('instanceId');
  const withInstance = { ...base, ...(instanceId ? { instanceId } : {}) };
  if (message === LOG_FACTS.warmStarted) return [{ ...withInstance, kind: 'started', detail: 'warm' }];
  if (message === LOG_FACTS.coldStarted) return [{ ...withInstance, kind: 'started', detail: 'cold' }];
  if (message === LOG_FACTS.deadLettered) return [{ ...base, kind: 'dead-lettered', detail: str('reason') ?? 'dead-lettered' }];
  if (message !== undefined && HELD_BY_BACKOFF.test(message)) return [{ ...base, kind: 'held', detail: message }];
  return [];
}

/** "github:123" → provider and CI job id (contract `qualifiedJobId`). */
function splitJobId(jobId: string): { provider?: string; ciJobId?: string } {
  const at = jobId.indexOf(':');
  return at > 0 ? { provider: jobId.slice(0, at), ciJobId: jobId.slice(at + 1) } : {};
}

/** An SQS message as the event source mapping hands it to the function. */
export function toRecord(m: Message, queueUrl: string, region = LOCAL_REGION): SQSRecord {
  const [, account = '000000000000', name = 'queue'] = /\/(\d+)\/([^/]+)$/.exec(queueUrl) ?? [];
  const attrs = (m.Attributes ?? {}) as Record<string, string>;
  return {
    messageId: m.MessageId!,
    receiptHandle: m.ReceiptHandle!,
    body: m.Body ?? '',
    attributes: attrs as unknown as SQSRecord['attributes'],
    messageAttributes: Object.fromEntries(
      Object.entries(m.MessageAttributes ?? {}).map(([k, v]: [string, MessageAttributeValue]) => [
        k,
        {
          dataType: v.DataType ?? 'String',
          ...(v.StringValue === undefined ? {} : { stringValue: v.StringValue }),
          stringListValues: v.StringListValues ?? [],
          binaryListValues: [],
        },
      ]),
    ),
    md5OfBody: m.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:${region}:${account}:${name}`,
    awsRegion: region,
  };
}
