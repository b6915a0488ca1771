import { describe, expect, it } from 'vitest';
import { DescribeRuleCommand, DisableRuleCommand, GetEventSourceMappingCommand, ScalingApi, ScalingApiError, UpdateEventSourceMappingCommand } from '../../lambdas/drain/scaling-api';
import { AwsCaller, isThrottling, isUnknownOutcome, UnknownOutcomeError, WRITE_IDEMPOTENT } from '../../lambdas/shared/aws-call';

interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body?: string;
}

/** A fetch that records each request and answers from a queue. */
function fakeFetch(...answers: Response[]) {
  const sent: Sent[] = [];
  const fetch = (async (url: URL, init: RequestInit) => {
    sent.push({ url: String(url), method: init.method!, headers: init.headers as Record<string, string>, ...(typeof init.body === 'string' ? { body: init.body } : {}) });
    return answers.shift() ?? new Response('{}', { status: 200 });
  }) as unknown as typeof globalThis.fetch;
  return { sent, fetch };
}

const credentials = async () => ({ accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' });
const json = (body: object, status = 200, headers: Record<string, string> = {}) => new Response(JSON.stringify(body), { status, headers });

describe('ScalingApi', () => {
  it('sends Lambda restJson and EventBridge awsJson requests to the Region endpoints, SigV4-signed for each service', async () => {
    const { sent, fetch } = fakeFetch(json({ State: 'Disabling' }), json({ State: 'Disabled' }), json({}), json({ State: 'DISABLED', Name: 'r' }));
    const api = new ScalingApi({ region: 'eu-west-1', credentials, fetch });
    expect(await api.send(new UpdateEventSourceMappingCommand({ UUID: 'u-1', Enabled: false }))).toEqual({ State: 'Disabling' });
    expect(await api.send(new GetEventSourceMappingCommand({ UUID: 'u-1' }))).toEqual({ State: 'Disabled' });
    expect(await api.send(new DisableRuleCommand({ Name: 'r' }))).toEqual({});
    expect(await api.send(new DescribeRuleCommand({ Name: 'r' }))).toEqual({ State: 'DISABLED' });
    expect(sent.map((s) => `${s.method} ${s.url} ${s.headers['x-amz-target'] ?? ''} ${s.body ?? ''}`)).toEqual([
      'PUT https://lambda.eu-west-1.amazonaws.com/2015-03-31/event-source-mappings/u-1  {"Enabled":false}',
      'GET https://lambda.eu-west-1.amazonaws.com/2015-03-31/event-source-mappings/u-1  ',
      'POST https://events.eu-west-1.amazonaws.com/ AWSEvents.DisableRule {"Name":"r"}',
      'POST https://events.eu-west-1.amazonaws.com/ AWSEvents.DescribeRule {"Name":"r"}',
    ]);
    expect(sent[0]!.headers.authorization).toMatch(/^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/eu-west-1\/lambda\/aws4_request, SignedHeaders=[^,]*host[^,]*, Signature=[0-9a-f]{64}$/);
    expect(sent[2]!.headers.authorization).toMatch(/\/eu-west-1\/events\/aws4_request/);
  });

  it('answers errors in the SDK shape, so AwsCaller tells refusals, throttling and unknown outcomes apart', async () => {
    const { fetch } = fakeFetch(
      json({ message: 'gone' }, 404, { 'x-amzn-errortype': 'ResourceNotFoundException:http://internal.amazon.com/' }),
      json({ __type: 'com.amazon.events#ThrottlingException', message: 'slow down' }, 400),
      new Response('<html>bad gateway</html>', { status: 502 }),
    );
    const api = new ScalingApi({ region: 'eu-west-1', credentials, fetch });
    const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as ScalingApiError);
    const notFound = await failure(api.send(new GetEventSourceMappingCommand({ UUID: 'u-1' })));
    expect([notFound?.name, notFound?.message, notFound?.$metadata.httpStatusCode]).toEqual(['ResourceNotFoundException', 'gone', 404]);
    expect(isThrottling(await failure(api.send(new DisableRuleCommand({ Name: 'r' }))))).toBe(true);
    const bad = await failure(api.send(new DisableRuleCommand({ Name: 'r' })));
    expect([bad?.name, isUnknownOutcome(bad)]).toEqual(['Http502', true]);
  });

  it('is retried by AwsCaller like an SDK client: a lost answer of an idempotent disable is sent again', async () => {
    const { sent, fetch } = fakeFetch(new Response('', { status: 503 }), json({ State: 'Disabling' }));
    const aws = new AwsCaller({ sleep: async () => {} });
    const api = new ScalingApi({ region: 'eu-west-1', credentials, fetch });
    expect(await aws.send(api, new UpdateEventSourceMappingCommand({ UUID: 'u-1', Enabled: false }), WRITE_IDEMPOTENT)).toEqual({ State: 'Disabling' });
    expect(sent).toHaveLength(2);
    const once = new AwsCaller({ sleep: async () => {} });
    const lost = fakeFetch(new Response('', { status: 503 }));
    await expect(once.send(new ScalingApi({ region: 'eu-west-1', credentials, fetch: lost.fetch }), new DisableRuleCommand({ Name: 'r' }), { ...WRITE_IDEMPOTENT, idempotent: false })).rejects.toBeInstanceOf(UnknownOutcomeError);
  });

  it('uses the China Regions\' DNS suffix, and one endpoint for both services when given (moto)', async () => {
    const { sent, fetch } = fakeFetch();
    await new ScalingApi({ region: 'cn-north-1', credentials, fetch }).send(new DescribeRuleCommand({ Name: 'r' }));
    await new ScalingApi({ region: 'us-east-1', credentials, fetch, endpoint: 'http://127.0.0.1:5000' }).send(new GetEventSourceMappingCommand({ UUID: 'u' }));
    expect(sent.map((s) => s.url)).toEqual(['https://events.cn-north-1.amazonaws.com.cn/', 'http://127.0.0.1:5000/2015-03-31/event-source-mappings/u']);
    expect(sent[1]!.headers.host).toBe('127.0.0.1:5000');
  });
});
