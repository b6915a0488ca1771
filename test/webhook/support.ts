import { createHmac, randomBytes } from 'node:crypto';
import type { APIGatewayProxyEvent, LambdaFunctionURLEvent } from 'aws-lambda';

/** A unique, recognisable secret per run, so a leak into a log is found by a plain search. */
export function plantSecret(label: string): string {
  return `planted-${label}-${randomBytes(12).toString('hex')}`;
}

/** The forms a secret could take in a log line. */
export function secretForms(secret: string): string[] {
  return [secret, Buffer.from(secret).toString('base64'), Buffer.from(secret).toString('base64url'), encodeURIComponent(secret), JSON.stringify(secret).slice(1, -1)];
}

export function functionUrlEvent(
  path: string,
  headers: Record<string, string>,
  body: string | Buffer,
  options: { base64?: boolean; method?: string } = {},
): LambdaFunctionURLEvent {
  const raw = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    // Function URLs deliver header names in lower case.
    headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])),
    requestContext: {
      accountId: 'anonymous',
      apiId: 'url-id',
      domainName: 'url-id.lambda-url.us-east-1.on.aws',
      domainPrefix: 'url-id',
      http: { method: options.method ?? 'POST', path, protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: 'test' },
      requestId: randomBytes(8).toString('hex'),
      routeKey: '$default',
      stage: '$default',
      time: '29/Nov/2026:19:00:00 +0000',
      timeEpoch: 0,
    },
    body: options.base64 ? raw.toString('base64') : raw.toString('utf8'),
    isBase64Encoded: options.base64 ?? false,
  } as LambdaFunctionURLEvent;
}

/**
 * The same delivery as an API Gateway REST API's Lambda proxy integration hands it over
 * (payload format 1.0, `WebhookExposure.apiGateway`): `path` without the stage (with the base
 * path of a custom domain's mapping, `basePath`), `httpMethod`, headers as the sender spelled them.
 */
export function restApiEvent(path: string, headers: Record<string, string>, body: string, options: { method?: string; basePath?: string } = {}): APIGatewayProxyEvent {
  const method = options.method ?? 'POST';
  return {
    resource: path,
    // Behind a custom domain, `path` carries its base path mapping; `resource` does not.
    path: options.basePath ? `/${options.basePath}${path}` : path,
    httpMethod: method,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])),
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: null,
    stageVariables: null,
    requestContext: {
      accountId: '111122223333',
      apiId: 'api-id',
      httpMethod: method,
      path: `/webhook${path}`,
      protocol: 'HTTP/1.1',
      requestId: randomBytes(8).toString('hex'),
      requestTimeEpoch: 0,
      resourceId: 'res',
      resourcePath: path,
      stage: 'webhook',
      identity: { sourceIp: '192.30.252.1' },
    },
    body,
    isBase64Encoded: false,
  } as unknown as APIGatewayProxyEvent;
}

export function githubHeaders(body: string | Buffer, secret: string, event: string, delivery: string): Record<string, string> {
  return {
    'Content-Type': 'application/json',
    'User-Agent': 'GitHub-Hookshot/abc123',
    'X-GitHub-Event': event,
    'X-GitHub-Delivery': delivery,
    'X-GitHub-Hook-ID': '123456',
    'X-Hub-Signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
  };
}

export function standardWebhookHeaders(body: string, signingKey: string, id: string, timestamp: number): Record<string, string> {
  const key = Buffer.from(signingKey.slice('whsec_'.length), 'base64');
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`,
  };
}
