import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { REFUSAL_REASONS } from '../shared/contract';

/**
 * Signature checks for both services, as pure functions over the raw body bytes. Every
 * comparison is constant-time; a result names what failed (never a secret or a signature).
 */
export type Verdict = { readonly ok: true } | { readonly ok: false; readonly reason: string; readonly refusal: Refusal };

/**
 * Why a delivery was refused, for the refusal metric (refusal.ts): `unsigned`, it carries no
 * signature or token at all; `mismatch`, one that does not verify (a wrong secret, a stale
 * timestamp); `secret`, ours is missing or unusable, so every delivery is refused.
 */
export type Refusal = keyof typeof REFUSAL_REASONS;

const OK: Verdict = { ok: true };
const fail = (reason: string, refusal: Refusal = 'mismatch'): Verdict => ({ ok: false, reason, refusal });

/** Equal-length buffers compared in constant time; a length mismatch is not secret. */
function sameBytes(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

// Hashing both sides first makes the comparison independent of the secret's length.
const COMPARE_KEY = randomBytes(32);
function sameSecret(given: string, expected: string): boolean {
  const h = (s: string) => createHmac('sha256', COMPARE_KEY).update(s, 'utf8').digest();
  return timingSafeEqual(h(given), h(expected));
}

const GITHUB_PREFIX = 'sha256=';

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body with the webhook secret>`
 * (https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries).
 */
export function verifyGitHubSignature(body: Buffer, header: string | undefined, secret: string): Verdict {
  if (!header) return fail('missing X-Hub-Signature-256', 'unsigned');
  if (!header.startsWith(GITHUB_PREFIX)) return fail('X-Hub-Signature-256 does not start with "sha256="');
  const given = header.slice(GITHUB_PREFIX.length);
  if (!/^[0-9a-fA-F]{64}$/.test(given)) return fail('X-Hub-Signature-256 is not 64 hex digits');
  const expected = createHmac('sha256', secret).update(body).digest();
  return sameBytes(Buffer.from(given, 'hex'), expected) ? OK : fail('X-Hub-Signature-256 does not match the body');
}

/** GitLab: the secret token is sent as is in `X-Gitlab-Token`. */
export function verifyGitLabToken(header: string | undefined, token: string): Verdict {
  if (header === undefined || header === '') return fail('missing X-Gitlab-Token', 'unsigned');
  return sameSecret(header, token) ? OK : fail('X-Gitlab-Token does not match');
}

export interface StandardWebhookHeaders {
  readonly id: string | undefined;
  readonly timestamp: string | undefined;
  readonly signature: string | undefined;
}

/** Standard Webhooks' recommended tolerance between the sender's clock and ours. */
export const DEFAULT_TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

/**
 * Standard Webhooks (https://www.standardwebhooks.com, GitLab's signing token):
 * `webhook-signature` holds space-separated `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
 * entries, the key is the base64 part of `whsec_<base64>`, and a timestamp outside the
 * tolerance is refused so a captured delivery cannot be replayed later.
 */
export function verifyStandardWebhook(
  body: Buffer,
  headers: StandardWebhookHeaders,
  signingKey: string,
  nowSeconds: number,
  toleranceSeconds = DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
): Verdict {
  if (!headers.id || !headers.timestamp || !headers.signature) return fail('missing webhook-id, webhook-timestamp or webhook-signature', 'unsigned');
  if (!/^\d{1,12}$/.test(headers.timestamp)) return fail('webhook-timestamp is not a Unix time in seconds');
  const skew = Math.abs(nowSeconds - Number(headers.timestamp));
  if (skew > toleranceSeconds) return fail(`webhook-timestamp is ${skew} s away from now, beyond the ${toleranceSeconds} s tolerance`);
  if (!signingKey.startsWith('whsec_')) return fail('the configured signing key does not start with "whsec_"', 'secret');
  const key = Buffer.from(signingKey.slice('whsec_'.length), 'base64');
  if (key.length === 0) return fail('the configured signing key is empty', 'secret');
  const expected = createHmac('sha256', key)
    .update(Buffer.concat([Buffer.from(`${headers.id}.${headers.timestamp}.`, 'utf8'), body]))
    .digest();
  let sawV1 = false;
  let matched = false;
  for (const entry of headers.signature.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    sawV1 = true;
    const given = entry.slice(comma + 1);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(given)) continue;
    // Check every entry, so the time taken does not say which one matched.
    if (sameBytes(Buffer.from(given, 'base64'), expected)) matched = true;
  }
  if (!sawV1) return fail('webhook-signature has no "v1," entry');
  return matched ? OK : fail('webhook-signature does not match the body');
}

/** Hex SHA-256, for ids derived from content. */
export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}
