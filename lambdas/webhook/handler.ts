import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SSMClient } from '@aws-sdk/client-ssm';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { requestMethod, requestPath, type WebhookEvent } from './http-event';
import { createCiProviders } from '../ci';
import { instanceIdOfRunnerName, LAMBDA_ENV, METRIC_NAMES, Provider, qualifiedJobId, type CiProvider, type FleetConfig, type JobMessage } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { LedgerWriter, senderStampsIntake } from '../shared/ledger';
import { createLogger, emitMetrics, type Logger, type Sink } from '../shared/log';
import { matchPool } from '../shared/match-pool';
import { candidatePools } from '../shared/candidate-pools';
import { createSecretCache, EmptyParameterError, type SecretCache } from '../shared/secrets';
import { createDeadline, DeadlineExceeded, type Deadline } from './deadline';
import type { JobDraft, JobStart } from './delivery';
import { classifyGitHubDelivery } from './github-delivery';
import { classifyGitLabDelivery } from './gitlab-delivery';
import { buildJobMessage, deduplicationId, gitLabDeliveryId, normaliseDeliveryId, traceIdFor } from './job-message';
import { logSafe, logSafeList } from './log-safe';
import { refusalMetric } from './refusal';
import { isTooLarge, messageBytes, TOO_LARGE_REASON, tooLargeRecord, tooLargeSummary } from './too-large';
import { DEFAULT_TIMESTAMP_TOLERANCE_SECONDS, verifyGitHubSignature, verifyGitLabToken, verifyStandardWebhook, type Verdict } from './verify';

export interface WebhookOptions {
  /**
   * Largest body accepted. workflow_job and Job Hook payloads are a few KB; GitHub caps
   * payloads at 25 MB and Function URLs at 6 MB, so anything near those is not a job.
   */
  readonly maxBodyBytes?: number;
  /**
   * Overall bound on one request, from its receipt. GitHub and GitLab give a delivery about
   * 10 s; every step below is also clipped to what remains of this.
   */
  readonly deadlineMs?: number;
  /**
   * Time kept for the SQS send: steps before it (config and secret reads, the tag lookup)
   * never eat into it, so a job that was verified still gets queued before the deadline.
   */
  readonly sendReserveMs?: number;
  /** Bound on reading the fleet config from SSM (a cold container). */
  readonly configReadTimeoutMs?: number;
  /** Bound on reading the webhook secrets from SSM (a cold container). */
  readonly secretReadTimeoutMs?: number;
  /**
   * Bound on the GitLab tag lookup. GitLab gives up on a delivery after about 10 s and a cold
   * container has already spent some of that; past this bound the job is queued unresolved.
   */
  readonly tagLookupTimeoutMs?: number;
  readonly timestampToleranceSeconds?: number;
  /** Bound on the SQS send. */
  readonly queueTimeoutMs?: number;
  readonly secretTtlMs?: number;
}

export interface WebhookDeps {
  readonly ssm: SSMClient;
  readonly sqs: SQSClient;
  /** Used by the CI providers (GitLab tag lookup); global fetch when absent. */
  readonly fetch?: typeof fetch;
  readonly now?: () => Date;
  /** Monotonic milliseconds for the request deadline (performance.now). */
  readonly clock?: () => number;
  readonly logger?: Logger;
  /** Where EMF metric lines go (stdout in Lambda). */
  readonly metricSink?: Sink;
  readonly env?: NodeJS.ProcessEnv;
  readonly options?: WebhookOptions;
}

export type WebhookHandler = (event: WebhookEvent) => Promise<APIGatewayProxyStructuredResultV2>;

/**
 * With these, a request answers within 8 s however slow its dependencies: the config read
 * (at most 3 s) and the secret read (at most 3 s) each leave 1.5 s for the send; the tag
 * lookup gets what is left above that (up to 3 s); the send gets the rest.
 */
export const DEFAULTS = {
  maxBodyBytes: 1024 * 1024,
  deadlineMs: 8_000,
  sendReserveMs: 1_500,
  configReadTimeoutMs: 3_000,
  secretReadTimeoutMs: 3_000,
  tagLookupTimeoutMs: 3_000,
  queueTimeoutMs: 3_000,
  secretTtlMs: 5 * 60_000,
} as const;

type Outcome = 'queued' | 'ignored' | 'rejected' | 'error';

function reply(statusCode: number, outcome: Outcome, reason: string): APIGatewayProxyStructuredResultV2 {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ outcome, reason }) };
}

/** Bad input: answered 4xx, and a redelivery would fail the same way. */
class Rejection extends Error {
  constructor(
    readonly statusCode: number,
    reason: string,
  ) {
    super(reason);
  }
}

/** The fleet cannot take the delivery now (already logged): answered 5xx, so the sender redelivers. */
class Failure extends Error {
  constructor(
    readonly statusCode: number,
    reason: string,
  ) {
    super(reason);
  }
}

/**
 * Builds the webhook handler. Everything that lives for the container (secret cache,
 * CI providers) is created here once; each request does verification, classification and
 * one SQS send.
 */
export function createWebhookHandler(deps: WebhookDeps): WebhookHandler {
  const env = deps.env ?? process.env;
  const now = deps.now ?? (() => new Date());
  const clock = deps.clock ?? (() => performance.now());
  const log = deps.logger ?? createLogger({ fn: 'webhook' });
  const opts = { ...DEFAULTS, timestampToleranceSeconds: DEFAULT_TIMESTAMP_TOLERANCE_SECONDS, ...deps.options };
  // Every SSM read is bounded by its step's cap, not by a fixed bound of the reader's own: a
  // shorter one would end a slow read with its own error (a 500) before the deadline decides.
  const secrets: SecretCache = createSecretCache(deps.ssm, { ttlMs: opts.secretTtlMs, timeoutMs: opts.secretReadTimeoutMs });
  let providers: { key: string; value: Partial<Record<Provider, CiProvider>> } | undefined;
  const providersFor = (config: FleetConfig) => {
    // The config is re-read every minute; keep the providers (and their token caches) while it is unchanged.
    const key = JSON.stringify(config);
    if (providers?.key !== key) providers = { key, value: createCiProviders(config, { ssm: deps.ssm, secretReadTimeoutMs: opts.secretReadTimeoutMs, ...(deps.fetch ? { fetch: deps.fetch } : {}) }) };
    return providers.value;
  };
  const ctx: Context = { deps, env, opts, secrets, log, providersFor, now };

  return async (event) => {
    const receivedAt = now();
    const deadline = createDeadline(ctx.opts.deadlineMs, clock);
    const path = requestPath(event).replace(/\/+$/, '') || '/';
    const route: Provider | undefined = path === '/github' ? Provider.GITHUB : path === '/gitlab' ? Provider.GITLAB : undefined;
    const reqLog = ctx.log.child({ route: route ?? logSafe(path, 40), requestId: logSafe(event.requestContext?.requestId ?? '', 64) });
    if (!route) {
      reqLog.warn('unknown path');
      return reply(404, 'rejected', 'unknown path: use /github or /gitlab');
    }
    let config: FleetConfig | undefined;
    let answer: APIGatewayProxyStructuredResultV2;
    try {
      const request = await admit(ctx, event, route, deadline, reqLog);
      config = request.config;
      answer = await serve(ctx, request, receivedAt, deadline, reqLog);
    } catch (e) {
      answer = settle(e, reqLog);
    }
    if ((answer.statusCode ?? 200) >= 500) countFailure(ctx, config);
    return answer;
  };
}

/**
 * A 5xx answer counts in `WebhookFailed`, which `WebhookErrorAlarm` watches with the function's
 * `Errors`: a webhook that fails every delivery pages at once, not only through lost
 * deliveries much later. Without the config (it could not be read) the namespace comes from
 * the environment the construct set.
 */
function countFailure(ctx: Context, config: FleetConfig | undefined): void {
  const namespace = config?.metrics.namespace ?? ctx.env[LAMBDA_ENV.metricNamespace];
  if (!namespace) {
    ctx.log.error(`${LAMBDA_ENV.metricNamespace} is not set: a failed delivery is not counted`);
    return;
  }
  emitMetrics(namespace, {}, { [METRIC_NAMES.webhookFailed]: 1 }, 'Count', ctx.deps.metricSink);
}

/** Verify, classify, resolve, act: a request past its parse step. */
async function serve(ctx: Context, request: Request, receivedAt: Date, deadline: Deadline, reqLog: Logger): Promise<APIGatewayProxyStructuredResultV2> {
  await verify(ctx, request, receivedAt, deadline);
  const delivery = classify(ctx, request);
  const dLog = reqLog.child({ deliveryId: logSafe(delivery.deliveryId, 80) });
  if (delivery.kind === 'ignore') {
    dLog.info('delivery acknowledged, not queued', { reason: delivery.reason });
    if (delivery.started) stampJobStarted(ctx, delivery.started, request.config, delivery.deliveryId, dLog);
    return reply(200, 'ignored', delivery.reason);
  }
  const message = await resolve(ctx, delivery.job, request.config, delivery.deliveryId, receivedAt, dLog, deadline);
  if ('unmatched' in message) return reply(200, 'ignored', message.unmatched);
  return await enqueue(ctx, message, request, dLog, deadline);
}

/** Parse: the method, the headers, the body within its limit, the fleet config and the queue. */
async function admit(ctx: Context, event: WebhookEvent, route: Provider, deadline: Deadline, reqLog: Logger): Promise<Request> {
  if (requestMethod(event) !== 'POST') throw new Rejection(405, 'only POST is accepted');
  const headers = lowerCaseHeaders(event.headers);
  const body = readBody(event, ctx.opts.maxBodyBytes);
  let config: FleetConfig;
  try {
    config = await deadline.run('fleet config read', ctx.opts.configReadTimeoutMs, ctx.opts.sendReserveMs, (signal) => loadFleetConfig(ctx.deps.ssm, ctx.env, Date.now(), { signal, timeoutMs: ctx.opts.configReadTimeoutMs }));
  } catch (e) {
    if (e instanceof DeadlineExceeded) throw e;
    reqLog.error('cannot load the fleet config', { error: (e as Error).message });
    throw new Failure(500, 'configuration unavailable');
  }
  if (!config[route]) throw new Rejection(404, `this fleet has no ${route} connection`);
  const queueUrl = ctx.env[LAMBDA_ENV.jobsQueueUrl];
  if (!queueUrl) {
    reqLog.error(`${LAMBDA_ENV.jobsQueueUrl} is not set`);
    throw new Failure(500, 'queue not configured');
  }
  return { route, headers, body, config, queueUrl };
}

/** Nothing is parsed as JSON, let alone queued, before the sender is verified. */
async function verify(ctx: Context, request: Request, receivedAt: Date, deadline: Deadline): Promise<void> {
  const { route, config, headers, body } = request;
  const verdict = await deadline.run('webhook secret read', ctx.opts.secretReadTimeoutMs, ctx.opts.sendReserveMs, (signal) =>
    route === 'github' ? verifyGitHub(ctx, config, headers, body, signal) : verifyGitLab(ctx, config, headers, body, receivedAt, signal),
  );
  if (!verdict.ok) {
    const counted = refusalMetric(config.metrics, route, verdict.refusal, headers);
    emitMetrics(config.metrics.namespace, counted.dimensions, { [counted.name]: 1 }, 'Count', ctx.deps.metricSink);
    throw new Rejection(401, verdict.reason);
  }
}

/** Decide what the delivery is: a job to queue, or one to acknowledge and drop (with why). */
function classify(ctx: Context, request: Request): Classified {
  const { route, headers, body, config } = request;
  const payload = parseJson(body, route);
  const deliveryId = route === 'github' ? normaliseDeliveryId(requireHeader(headers, 'x-github-delivery')) : gitLabDeliveryId(headers, body);
  const classified = route === 'github' ? classifyGitHubDelivery(requireHeader(headers, 'x-github-event'), payload, config.github, config.pools) : classifyGitLabDelivery(payload, config.gitlab, config.pools);
  if (classified.kind === 'invalid') throw new Rejection(400, classified.reason);
  return { ...classified, deliveryId };
}

/** Resolve: the message to queue (labels and pool), or why the job matches no pool. */
async function resolve(ctx: Context, job: JobDraft, config: FleetConfig, deliveryId: string, receivedAt: Date, dLog: Logger, deadline: Deadline): Promise<JobMessage | Unmatched> {
  try {
    return await jobMessageFor(ctx, job, config, deliveryId, receivedAt, dLog, deadline);
  } catch (e) {
    if (e instanceof DeadlineExceeded) throw e;
    // The contract's reader refused the message (too many labels, a bad field): the delivery is bad input.
    throw new Rejection(400, (e as Error).message);
  }
}

/** Act: one SQS send, deduplicated by the delivery; a message SQS would refuse is recorded instead. */
async function enqueue(ctx: Context, message: JobMessage, request: Request, dLog: Logger, deadline: Deadline): Promise<APIGatewayProxyStructuredResultV2> {
  const { config, queueUrl } = request;
  const jLog = dLog.child({ traceId: message.traceId, jobId: logSafe(message.jobId), pool: message.pool ?? null });
  const messageBody = JSON.stringify(message);
  const size = messageBytes(messageBody);
  if (isTooLarge(size)) return await recordTooLarge(ctx, message, size, config, jLog, deadline);
  const command = new SendMessageCommand({
    QueueUrl: queueUrl,
    MessageBody: messageBody,
    MessageGroupId: message.jobId,
    MessageDeduplicationId: deduplicationId(message.provider, message.deliveryId),
  });
  try {
    // The last step keeps nothing back: it may use all that remains.
    await deadline.run('queue send', ctx.opts.queueTimeoutMs, 0, (signal) => ctx.deps.sqs.send(command, { abortSignal: signal }));
  } catch (e) {
    jLog.error('cannot queue the job', { error: logSafe((e as Error).name) });
    // A redelivery is harmless even if this send did land: SQS drops the same deduplication id.
    return e instanceof DeadlineExceeded ? reply(503, 'error', 'queue too slow, redeliver later') : reply(500, 'error', 'queue unavailable, redeliver later');
  }
  jLog.info('job queued', { labels: logSafeList(message.labels), labelsResolved: message.labelsResolved });
  // A job queued with its tags unresolved has no pool yet: scale-up stamps its intake.
  if (senderStampsIntake(message)) new LedgerWriter(config.metrics, jLog, ctx.deps.metricSink).stampQueued(message, message.pool ?? 'unresolved', ctx.now());
  emitMetrics(config.metrics.namespace, { [config.metrics.dimensions.pool]: message.pool ?? 'unresolved' }, { [METRIC_NAMES.jobsReceived]: 1 }, 'Count', ctx.deps.metricSink);
  return reply(202, 'queued', message.labelsResolved ? 'queued' : 'queued-labels-unresolved');
}

/**
 * The ledger's last stage, for a job one of this fleet's runners took (its name carries the
 * instance id): the provider's start time, measured from the provider's creation time. The
 * delivery comes anyway (GitHub sends every workflow_job action, a GitLab Job Hook every
 * status), so this costs no request and queues nothing. Its pool: the job's labels (GitHub)
 * or its runner's tags (GitLab), matched as a queued job's are. Its trace id is this
 * delivery's: the queued delivery's is not known here, the job id joins the two.
 */
function stampJobStarted(ctx: Context, start: JobStart, config: FleetConfig, deliveryId: string, dLog: Logger): void {
  if (instanceIdOfRunnerName(config.prefix, start.runnerName) === undefined) return;
  const pool = matchPool(config.pools, start.provider, start.labels).pool?.name ?? 'unresolved';
  const job = { traceId: traceIdFor(start.provider, deliveryId), jobId: qualifiedJobId(start.provider, start.providerJobId) };
  new LedgerWriter(config.metrics, dLog, ctx.deps.metricSink).stamp(job, pool, 'job-started', new Date(Date.parse(start.startedAt)), new Date(Date.parse(start.createdAt)));
}

/** Settle a step that threw: bad input is a 4xx; anything the sender should redeliver is a 5xx. */
function settle(e: unknown, reqLog: Logger): APIGatewayProxyStructuredResultV2 {
  if (e instanceof Rejection) {
    reqLog.warn('delivery rejected', { status: e.statusCode, reason: e.message });
    return reply(e.statusCode, 'rejected', e.message);
  }
  if (e instanceof Failure) return reply(e.statusCode, 'error', e.message);
  if (e instanceof DeadlineExceeded) {
    // Before the signature is checked nothing may be queued; a 5xx lets the sender redeliver
    // (GitHub: "Redeliver" or the API; GitLab: the hook's "Resend request").
    reqLog.error('request deadline reached before the delivery could be verified', { step: e.step, timeoutMs: e.timeoutMs });
    return reply(503, 'error', 'dependencies too slow, redeliver later');
  }
  reqLog.error('delivery failed', { error: logSafe((e as Error).message, 200) });
  return reply(500, 'error', 'internal error');
}

async function verifyGitHub(ctx: Context, config: FleetConfig, headers: Headers, body: Buffer, signal: AbortSignal): Promise<Verdict> {
  const name = config.parameters.github.webhookSecret;
  // A parameter missing or empty refuses every delivery: counted as a refusal (which pages), not
  // a 500 that GitHub would only list as failed. A read that failed (throttled, timed out) throws: 5xx.
  const secret = await ctx.secrets.find(name, signal).catch((e: unknown) => {
    if (e instanceof EmptyParameterError) return '';
    throw e;
  });
  if (!secret) {
    ctx.log.error('no GitHub webhook secret configured: every GitHub delivery is refused', { parameter: name, found: secret === '' ? 'empty' : 'missing' });
    return { ok: false, reason: 'no GitHub webhook secret is configured', refusal: 'secret' };
  }
  return verifyGitHubSignature(body, headers['x-hub-signature-256'], secret);
}

async function verifyGitLab(ctx: Context, config: FleetConfig, headers: Headers, body: Buffer, at: Date, signal: AbortSignal): Promise<Verdict> {
  const names = config.parameters.gitlab;
  const [token, signingKey] = await Promise.all([ctx.secrets.find(names.webhookToken, signal), ctx.secrets.find(names.webhookSigningKey, signal)]);
  if (token === undefined && signingKey === undefined) {
    ctx.log.error('no GitLab webhook secret configured: every GitLab delivery is refused', { parameters: [names.webhookToken, names.webhookSigningKey] });
    return { ok: false, reason: 'no GitLab webhook secret is configured', refusal: 'secret' };
  }
  // Each configured secret is checked; a delivery must satisfy all of them.
  if (token !== undefined) {
    const v = verifyGitLabToken(headers['x-gitlab-token'], token);
    if (!v.ok) return v;
  }
  if (signingKey !== undefined) {
    const v = verifyStandardWebhook(
      body,
      { id: headers['webhook-id'], timestamp: headers['webhook-timestamp'], signature: headers['webhook-signature'] },
      signingKey,
      Math.floor(at.getTime() / 1000),
      ctx.opts.timestampToleranceSeconds,
    );
    if (!v.ok) return v;
  }
  return { ok: true };
}

/**
 * A job whose message SQS would refuse: every redelivery would fail the same way, and a 4xx
 * would list the delivery as failed at GitHub and count toward GitLab disabling the hook.
 * So it is answered 200 `too-large`, counted, and a small summary is kept in the dead-letter
 * queue; if that record cannot be written the answer is a 5xx, so nothing is dropped silently.
 */
async function recordTooLarge(ctx: Context, message: JobMessage, size: number, config: FleetConfig, jLog: Logger, deadline: Deadline): Promise<APIGatewayProxyStructuredResultV2> {
  const summary = tooLargeSummary(message, size);
  const deadLetterQueueUrl = ctx.env[LAMBDA_ENV.deadLetterQueueUrl];
  try {
    if (!deadLetterQueueUrl) throw new Error(`${LAMBDA_ENV.deadLetterQueueUrl} is not set`);
    await deadline.run('dead-letter send', ctx.opts.queueTimeoutMs, 0, (signal) => ctx.deps.sqs.send(tooLargeRecord(deadLetterQueueUrl, summary), { abortSignal: signal }));
  } catch (e) {
    jLog.error('job message too large, and recording it in the dead-letter queue failed', { sizeBytes: size, error: logSafe((e as Error).name === 'Error' ? (e as Error).message : (e as Error).name, 120) });
    return e instanceof DeadlineExceeded ? reply(503, 'error', 'dead-letter queue too slow, redeliver later') : reply(500, 'error', 'dead-letter queue unavailable, redeliver later');
  }
  jLog.error('job message too large for the queue; recorded in the dead-letter queue', { sizeBytes: size, maxBytes: summary.maxBytes });
  emitMetrics(
    config.metrics.namespace,
    { [config.metrics.dimensions.pool]: message.pool ?? 'unresolved', [config.metrics.dimensions.reason]: TOO_LARGE_REASON },
    { [METRIC_NAMES.deadLettered]: 1 },
    'Count',
    ctx.deps.metricSink,
  );
  return reply(200, 'ignored', TOO_LARGE_REASON);
}

/** The message to queue, or why the job's labels match no pool. */
async function jobMessageFor(ctx: Context, job: JobDraft, config: FleetConfig, deliveryId: string, receivedAt: Date, dLog: Logger, deadline: Deadline): Promise<JobMessage | Unmatched> {
  let labels: readonly string[] = job.labels;
  if (job.provider === 'gitlab') {
    const unresolved = buildJobMessage(job, { labels: [], labelsResolved: false, deliveryId, receivedAt });
    const resolved = await lookUpTags(ctx, unresolved, config, dLog.child({ traceId: unresolved.traceId }), deadline);
    if (resolved === undefined) return unresolved;
    labels = resolved;
  }
  // A GitHub job matches the pools of its own organisation or repository only; a GitLab job of a project pool only its project's.
  const match = matchPool(candidatePools(config, job), job.provider, labels);
  if (!match.pool) {
    dLog.info('delivery acknowledged, not queued', { reason: match.reason, labels: logSafeList(labels) });
    return { unmatched: match.reason };
  }
  return buildJobMessage(job, { labels, labelsResolved: true, pool: match.pool.name, deliveryId, receivedAt });
}

/**
 * The job's tags, or undefined when GitLab did not answer within the lookup's bound or the
 * time the deadline leaves above the send's reserve: the job is then queued unresolved and
 * scale-up resolves the tags, so a slow GitLab costs a later lookup, never the job.
 */
async function lookUpTags(ctx: Context, job: JobMessage, config: FleetConfig, jLog: Logger, deadline: Deadline): Promise<string[] | undefined> {
  const gitlab = ctx.providersFor(config).gitlab;
  if (!gitlab?.resolveLabels) return undefined;
  try {
    // The deadline's race makes the bound hold even if a provider ignored the signal.
    return await deadline.run('tag lookup', ctx.opts.tagLookupTimeoutMs, ctx.opts.sendReserveMs, (signal) => gitlab.resolveLabels!(job, signal));
  } catch (e) {
    jLog.warn('GitLab tag lookup failed; queueing the job with its tags unresolved', { error: logSafe((e as Error).message, 200) });
    return undefined;
  }
}


type Unmatched = { readonly unmatched: string };

/** What lives for the container, shared by the request's steps. */
interface Context {
  readonly deps: WebhookDeps;
  readonly env: NodeJS.ProcessEnv;
  readonly opts: Required<WebhookOptions>;
  readonly secrets: SecretCache;
  readonly log: Logger;
  readonly providersFor: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>;
  readonly now: () => Date;
}

/** A request past its parse step: who sent it, what, and where its job would go. */
interface Request {
  readonly route: Provider;
  readonly headers: Headers;
  readonly body: Buffer;
  readonly config: FleetConfig;
  readonly queueUrl: string;
}

type Classified = ({ readonly kind: 'job'; readonly job: JobDraft } | { readonly kind: 'ignore'; readonly reason: string; readonly started?: JobStart }) & { readonly deliveryId: string };

type Headers = Readonly<Record<string, string | undefined>>;

function lowerCaseHeaders(headers: WebhookEvent['headers'] | undefined): Headers {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) if (v !== undefined) out[k.toLowerCase()] = v;
  return out;
}

function requireHeader(headers: Headers, name: string): string {
  const value = headers[name];
  if (!value) throw new Rejection(400, `missing ${name} header`);
  return value;
}

/** The raw body bytes the sender signed; Function URLs base64-encode bodies they do not treat as text. */
function readBody(event: WebhookEvent, maxBytes: number): Buffer {
  const raw = event.body ?? '';
  // Check the size before decoding or hashing anything: base64 is 4 characters per 3 bytes.
  const approxBytes = event.isBase64Encoded ? Math.floor((raw.length * 3) / 4) : Buffer.byteLength(raw, 'utf8');
  if (approxBytes > maxBytes + 2) throw new Rejection(413, `body over the ${maxBytes}-byte limit`);
  const body = event.isBase64Encoded ? Buffer.from(raw, 'base64') : Buffer.from(raw, 'utf8');
  if (body.length > maxBytes) throw new Rejection(413, `body over the ${maxBytes}-byte limit`);
  return body;
}

function parseJson(body: Buffer, route: Provider): unknown {
  if (body.length === 0) throw new Rejection(400, 'empty body');
  const text = body.toString('utf8');
  if (route === 'github' && text.startsWith('payload=')) {
    throw new Rejection(400, 'form-encoded payload: set the webhook content type to application/json');
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new Rejection(400, 'body is not JSON');
  }
}
