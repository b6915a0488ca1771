import { describe, expect, it } from 'vitest';
import { isTraceId, parseJobMessage, Provider } from '../../lambdas/shared/contract';
import { buildJobMessage, deduplicationId, gitLabDeliveryId, normaliseDeliveryId, traceIdFor } from '../../lambdas/webhook/job-message';

/**
 * SQS MessageDeduplicationId: at most 128 characters, each an alphanumeric or one of
 * !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ (every printable ASCII character but the space).
 */
const SQS_DEDUP_ID = /^[\x21-\x7e]{1,128}$/;
const NORMALISED = /^[A-Za-z0-9._:-]{1,128}$/;

const uuid = '72d3162e-cc78-11e3-81ab-4c9367dc0958';
const ids: [string, string][] = [
  ['a GitHub delivery GUID', uuid],
  ['a Standard Webhooks id', 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W'],
  ['64 characters (the longest trace id)', 'a'.repeat(64)],
  ['65 characters', 'a'.repeat(65)],
  ['100 characters (the longest kept in a deduplication id)', 'b'.repeat(100)],
  ['101 characters', 'b'.repeat(101)],
  ['128 characters (the longest kept as a delivery id)', 'c'.repeat(128)],
  ['129 characters', 'c'.repeat(129)],
  ['10 000 characters', 'd'.repeat(10_000)],
  ['colons (allowed in a delivery id, not in a trace id)', 'gl:delivery:42'],
  ['a space', 'abc def'],
  ['non-ASCII', 'délivrance-é'],
  ['an emoji', 'id-🚀'],
  ['a newline and a forged log line', 'x\n{"level":"error"}'],
  ['control characters', 'a\u0000b\u001bc'],
  ['SQS punctuation that a delivery id does not keep', 'a/b+c=d?e!'],
  ['only a slash', '/'],
];

describe('delivery, deduplication and trace ids', () => {
  it.each(ids)('%s', (_name, raw) => {
    const delivery = normaliseDeliveryId(raw);
    expect(delivery).toMatch(NORMALISED);
    expect(normaliseDeliveryId(delivery)).toBe(delivery); // idempotent: a stored id normalises to itself
    expect(normaliseDeliveryId(raw)).toBe(delivery); // deterministic: a redelivery gets the same id
    if (NORMALISED.test(raw)) expect(delivery).toBe(raw); // usable ids are kept as given
    for (const provider of ['github', 'gitlab'] as Provider[]) {
      const dedup = deduplicationId(provider, delivery);
      expect(dedup).toMatch(SQS_DEDUP_ID);
      expect(dedup.startsWith(`${provider}:`)).toBe(true);
      expect(deduplicationId(provider, delivery)).toBe(dedup);
      const trace = traceIdFor(provider, delivery);
      expect(isTraceId(trace)).toBe(true);
      expect(traceIdFor(provider, delivery)).toBe(trace);
      // The message built from it is one scale-up's reader accepts.
      const message = buildJobMessage({ provider, providerJobId: '7', owner: 'o', project: 'p', labels: [] }, { labels: [], labelsResolved: false, deliveryId: delivery, receivedAt: new Date(0) });
      expect(parseJobMessage(JSON.stringify(message))).toMatchObject({ deliveryId: delivery, traceId: trace });
    }
  });

  it('keeps short ids readable and digests the rest', () => {
    expect(deduplicationId(Provider.GITHUB, uuid)).toBe(`github:${uuid}`);
    expect(traceIdFor(Provider.GITHUB, uuid)).toBe(uuid);
    expect(deduplicationId(Provider.GITLAB, 'b'.repeat(100))).toBe(`gitlab:${'b'.repeat(100)}`);
    expect(deduplicationId(Provider.GITLAB, 'b'.repeat(101))).toMatch(/^gitlab:sha256:[0-9a-f]{64}$/);
    expect(normaliseDeliveryId('c'.repeat(128))).toBe('c'.repeat(128));
    expect(normaliseDeliveryId('c'.repeat(129))).toMatch(/^sha256-[0-9a-f]{48}$/);
    expect(traceIdFor(Provider.GITLAB, 'gl:delivery:42')).toMatch(/^gitlab-[0-9a-f]{40}$/);
  });

  it('never maps two different ids (or two providers) to one deduplication or trace id', () => {
    const delivered = ids.map(([, raw]) => normaliseDeliveryId(raw));
    expect(new Set(delivered).size).toBe(ids.length);
    const dedups = delivered.flatMap((d) => [deduplicationId(Provider.GITHUB, d), deduplicationId(Provider.GITLAB, d)]);
    expect(new Set(dedups).size).toBe(dedups.length);
    const traces = delivered.map((d) => traceIdFor(Provider.GITLAB, d));
    expect(new Set(traces).size).toBe(traces.length);
  });

  it('GitLab: webhook-id, else Idempotency-Key, else a digest of the body', () => {
    const body = Buffer.from('{"object_kind":"build"}');
    expect(gitLabDeliveryId({ 'webhook-id': 'msg_1', 'idempotency-key': 'k' }, body)).toBe('msg_1');
    expect(gitLabDeliveryId({ 'idempotency-key': 'x'.repeat(200) }, body)).toMatch(/^sha256-[0-9a-f]{48}$/);
    expect(gitLabDeliveryId({}, body)).toMatch(/^body-sha256-[0-9a-f]{48}$/);
    expect(gitLabDeliveryId({}, body)).toBe(gitLabDeliveryId({}, Buffer.from(body)));
  });
});
