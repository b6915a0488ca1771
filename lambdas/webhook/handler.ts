import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { SSMClient } from '@aws-sdk/client-ssm';
import type { APIGatewayProxyResultV2, LambdaFunctionURLEvent } from 'aws-lambda';
import { createCiProviders } from '../ci';
import { LAMBDA_ENV, METRIC_NAMES, type CiProvider, type FleetConfig, type JobMessage, type Provider } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { createLogger, emitMetrics, type Logger, type Sink } from '../shared/log';
import { matchPool } from '../shared/match-pool';
import { createSecretCache, type SecretCache } from '../shared/secrets';
import type { JobDraft } from './delivery';
import { classifyGitHubDelivery } from './github-delivery';
import { classifyGitLabDelivery } from './gitlab-delivery';
import { buildJobMessage, deduplicationId, gitLabDeliveryId, normaliseDeliveryId } from './job-message';
import { logSafe, logSafeList } from './log-safe';
import { DEFAULT_TIMESTAMP_TOLERANCE_SECONDS, verifyGitHubSignature, verifyGitLabToken, verifyStandardWebhook, type Verdict } from './verify';

export interface WebhookOptions {
  /**
   * Largest body accepted. workflow_job and Job Hook payloads are a few KB; GitHub caps
   * payloads at 25 MB and Function URLs at 6 MB, so anything near those is not a job.
   */
  readonly maxBodyBytes?: number;
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
  readonly logger?: Logger;
  /** Where EMF metric lines go (stdout in Lambda). */
  readonly metricSink?: Sink;
  readonly env?: NodeJS.ProcessEnv;
  readonly options?: WebhookOptions;
}

export type WebhookHandler = (event: LambdaFunctionURLEvent) => Promise<APIGatewayProxyResultV2>;

export const DEFAULTS = {
  maxBodyBytes: 1024 * 1024,
  tagLookupTimeoutMs: 3_000,
  queueTimeoutMs: 3_000,
  secretTtlMs: 5 * 60_000,
} as const;

type Outcome = 'queued' | 'ignored' | 'rejected' | 'error';

function reply(statusCode: number, outcome: Outcome, reason: string): APIGatewayProxyResultV2 {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ outcome, reason }) };
}

class Rejection extends Error {
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
  const log = deps.logger ?? createLogger({ fn: 'webhook' });
  const opts = { ...DEFAULTS, timestampToleranceSeconds: DEFAULT_TIMESTAMP_TOLERANCE_SECONDS, ...deps.options };
  const secrets: SecretCache = createSecretCache(deps.ssm, { ttlMs: opts.secretTtlMs });
  let providers: { key: string; value: Partial<Record<Provider, CiProvider>> } | undefined;
  const providersFor = (config: FleetConfig) => {
    // The config is re-read every minute; keep the providers (and their token caches) while it is unchanged.
    const key = JSON.stringify(config);
    if (providers?.key !== key) providers = { key, value: createCiProviders(config, { ssm: deps.ssm, ...(deps.fetch ? { fetch: deps.fetch } : {}) }) };
    return providers.value;
  };

  return async (event) => {
    const receivedAt = now();
    const path = (event.rawPath ?? '/').replace(/\/+$/, '') || '/';
    const route: Provider | undefined = path === '/github' ? 'github' : path === '/gitlab' ? 'gitlab' : undefined;
    const reqLog = log.child({ route: route ?? logSafe(path, 40), requestId: logSafe(event.requestContext?.requestId ?? '', 64) });
    if (!route) {
      reqLog.warn('unknown path');
      return reply(404, 'rejected', 'unknown path: use /github or /gitlab');
    }
    try {
      if ((event.requestContext?.http?.method ?? 'POST') !== 'POST') throw new Rejection(405, 'only POST is accepted');
      const headers = lowerCaseHeaders(event.headers);
      const body = readBody(event, opts.maxBodyBytes);
      let config: FleetConfig;
      try {
        config = await loadFleetConfig(deps.ssm, env);
      } catch (e) {
        reqLog.error('cannot load the fleet config', { error: (e as Error).message });
        return reply(500, 'error', 'configuration unavailable');
      }
      if (!config[route]) throw new Rejection(404, `this fleet has no ${route} connection`);
      const queueUrl = env[LAMBDA_ENV.jobsQueueUrl];
      if (!queueUrl) {
        reqLog.error(`${LAMBDA_ENV.jobsQueueUrl} is not set`);
        return reply(500, 'error', 'queue not configured');
      }

      const verdict = route === 'github' ? await verifyGitHub(config, headers, body) : await verifyGitLab(config, headers, body, receivedAt);
      if (!verdict.ok) throw new Rejection(401, verdict.reason);

      const payload = parseJson(body, route);
      const deliveryId =
        route === 'github' ? normaliseDeliveryId(requireHeader(headers, 'x-github-delivery')) : gitLabDeliveryId(headers, body);
      const classified = route === 'github' ? classifyGitHubDelivery(requireHeader(headers, 'x-github-event'), payload, config.github) : classifyGitLabDelivery(payload, config.gitlab);
      const dLog = reqLog.child({ deliveryId: logSafe(deliveryId, 80) });
      if (classified.kind === 'invalid') throw new Rejection(400, classified.reason);
      if (classified.kind === 'ignore') {
        dLog.info('delivery acknowledged, not queued', { reason: classified.reason });
        return reply(200, 'ignored', classified.reason);
      }

      let message: JobMessage | undefined;
      try {
        message = await jobMessageFor(classified.job, config, deliveryId, receivedAt, dLog);
      } catch (e) {
        // The contract's reader refused the message (too many labels, a bad field): the delivery is bad input.
        throw new Rejection(400, (e as Error).message);
      }
      if (!message) return reply(200, 'ignored', 'no-matching-pool');
      const jLog = dLog.child({ traceId: message.traceId, jobId: logSafe(message.jobId), pool: message.pool ?? null });
      try {
        await deps.sqs.send(
          new SendMessageCommand({
            QueueUrl: queueUrl,
            MessageBody: JSON.stringify(message),
            MessageGroupId: message.jobId,
            MessageDeduplicationId: deduplicationId(message.provider, message.deliveryId),
          }),
          { abortSignal: AbortSignal.timeout(opts.queueTimeoutMs) },
        );
      } catch (e) {
        jLog.error('cannot queue the job', { error: logSafe((e as Error).name) });
        return reply(500, 'error', 'queue unavailable, redeliver later');
      }
      jLog.info('job queued', { labels: logSafeList(message.labels), labelsResolved: message.labelsResolved });
      emitMetrics(config.metrics.namespace, { [config.metrics.dimensions.pool]: message.pool ?? 'unresolved' }, { [METRIC_NAMES.jobsReceived]: 1 }, 'Count', deps.metricSink);
      return reply(202, 'queued', message.labelsResolved ? 'queued' : 'queued-labels-unresolved');
    } catch (e) {
      if (e instanceof Rejection) {
        reqLog.warn('delivery rejected', { status: e.statusCode, reason: e.message });
        return reply(e.statusCode, 'rejected', e.message);
      }
      reqLog.error('delivery failed', { error: logSafe((e as Error).message, 200) });
      return reply(500, 'error', 'internal error');
    }
  };

  async function verifyGitHub(config: FleetConfig, headers: Headers, body: Buffer): Promise<Verdict> {
    const secret = await secrets.get(config.parameters.github.webhookSecret);
    return verifyGitHubSignature(body, headers['x-hub-signature-256'], secret);
  }

  async function verifyGitLab(config: FleetConfig, headers: Headers, body: Buffer, at: Date): Promise<Verdict> {
    const names = config.parameters.gitlab;
    const [token, signingKey] = await Promise.all([secrets.find(names.webhookToken), secrets.find(names.webhookSigningKey)]);
    if (token === undefined && signingKey === undefined) {
      log.error('no GitLab webhook secret configured: every GitLab delivery is refused', { parameters: [names.webhookToken, names.webhookSigningKey] });
      return { ok: false, reason: 'no GitLab webhook secret is configured' };
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
        opts.timestampToleranceSeconds,
      );
      if (!v.ok) return v;
    }
    return { ok: true };
  }

  /** The message to queue, or undefined when the job's labels match no pool. */
  async function jobMessageFor(job: JobDraft, config: FleetConfig, deliveryId: string, receivedAt: Date, dLog: Logger): Promise<JobMessage | undefined> {
    let labels: readonly string[] = job.labels;
    if (job.provider === 'gitlab') {
      const unresolved = buildJobMessage(job, { labels: [], labelsResolved: false, deliveryId, receivedAt });
      const resolved = await lookUpTags(unresolved, config, dLog.child({ traceId: unresolved.traceId }));
      if (resolved === undefined) return unresolved;
      labels = resolved;
    }
    const match = matchPool(config.pools, job.provider, labels);
    if (!match.pool) {
      dLog.info('delivery acknowledged, not queued', { reason: match.reason, labels: logSafeList(labels) });
      return undefined;
    }
    return buildJobMessage(job, { labels, labelsResolved: true, pool: match.pool.name, deliveryId, receivedAt });
  }

  /** The job's tags, or undefined when GitLab did not answer in time (scale-up resolves them later). */
  async function lookUpTags(job: JobMessage, config: FleetConfig, jLog: Logger): Promise<string[] | undefined> {
    const gitlab = providersFor(config).gitlab;
    if (!gitlab?.resolveLabels) return undefined;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`tag lookup exceeded ${opts.tagLookupTimeoutMs} ms`)), opts.tagLookupTimeoutMs);
    try {
      // The race makes the bound hold even if a provider ignored the signal.
      const aborted = new Promise<never>((_, reject) => controller.signal.addEventListener('abort', () => reject(controller.signal.reason as Error), { once: true }));
      return await Promise.race([gitlab.resolveLabels(job, controller.signal), aborted]);
    } catch (e) {
      jLog.warn('GitLab tag lookup failed; queueing the job with its tags unresolved', { error: logSafe((e as Error).message, 200) });
      return undefined;
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
  }
}

type Headers = Readonly<Record<string, string | undefined>>;

function lowerCaseHeaders(headers: LambdaFunctionURLEvent['headers'] | undefined): Headers {
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
function readBody(event: LambdaFunctionURLEvent, maxBytes: number): Buffer {
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
