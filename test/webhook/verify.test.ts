import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { verifyGitHubSignature, verifyGitLabToken, verifyStandardWebhook } from '../../lambdas/webhook/verify';

const body = Buffer.from('{"action":"queued"}');
const secret = 'gh-secret-7f3a';
const sign = (b: Buffer, s = secret) => `sha256=${createHmac('sha256', s).update(b).digest('hex')}`;

describe('verifyGitHubSignature', () => {
  it('accepts the signature GitHub computes, in either hex case', () => {
    expect(verifyGitHubSignature(body, sign(body), secret)).toEqual({ ok: true });
    expect(verifyGitHubSignature(body, `sha256=${sign(body).slice(7).toUpperCase()}`, secret)).toEqual({ ok: true });
  });
  it.each([
    ['missing', undefined, /missing/],
    ['empty', '', /missing/],
    ['wrong secret', sign(body, 'other'), /does not match/],
    ['other body', sign(Buffer.from('{}')), /does not match/],
    ['truncated', sign(body).slice(0, 40), /64 hex/],
    ['sha1 prefix', sign(body).replace('sha256=', 'sha1='), /sha256=/],
    ['no prefix', sign(body).slice(7), /sha256=/],
    ['not hex', `sha256=${'z'.repeat(64)}`, /64 hex/],
  ])('refuses %s', (_name, header, reason) => {
    const v = verifyGitHubSignature(body, header, secret);
    expect(v.ok).toBe(false);
    expect((v as { reason: string }).reason).toMatch(reason);
  });
});

describe('verifyGitLabToken', () => {
  it('accepts the exact token only', () => {
    const token = 'tok-1234567890abcdef';
    expect(verifyGitLabToken(token, token).ok).toBe(true);
    for (const wrong of ['tok-1234567890abcdeF', 'tok-1234567890abcde', `${token}0`, 'tok-1234', token.toUpperCase(), ' ' + token, '', undefined]) {
      expect(verifyGitLabToken(wrong, token).ok, String(wrong)).toBe(false);
    }
  });
});

describe('verifyStandardWebhook', () => {
  const key = Buffer.from('0123456789abcdef0123456789abcdef');
  const signingKey = `whsec_${key.toString('base64')}`;
  const id = 'msg_2b6c';
  const ts = 1_800_000_000;
  const sig = (b: Buffer, k = key, i = id, t = ts) => `v1,${createHmac('sha256', k).update(`${i}.${t}.${b.toString()}`).digest('base64')}`;
  const headers = (signature: string | undefined, timestamp = String(ts)) => ({ id, timestamp, signature });

  it('accepts a valid signature, also among several entries', () => {
    expect(verifyStandardWebhook(body, headers(sig(body)), signingKey, ts)).toEqual({ ok: true });
    expect(verifyStandardWebhook(body, headers(`v1,AAAA ${sig(body)}`), signingKey, ts + 299)).toEqual({ ok: true });
  });
  it.each([
    ['missing signature', headers(undefined), ts, /missing/],
    ['wrong key', headers(sig(body, Buffer.from('another key of 32 bytes length!!'))), ts, /does not match/],
    ['other body', headers(sig(Buffer.from('{}'))), ts, /does not match/],
    ['other id', headers(sig(body, key, 'msg_other')), ts, /does not match/],
    ['v2 prefix', headers(sig(body).replace('v1,', 'v2,')), ts, /no "v1,"/],
    ['truncated', headers(sig(body).slice(0, 20)), ts, /does not match/],
    ['timestamp too old', headers(sig(body)), ts + 301, /tolerance/],
    ['timestamp in the future', headers(sig(body)), ts - 301, /tolerance/],
    ['timestamp not a number', headers(sig(body), '2026-01-01'), ts, /Unix time/],
  ])('refuses %s', (_name, h, now, reason) => {
    const v = verifyStandardWebhook(body, h, signingKey, now);
    expect(v.ok).toBe(false);
    expect((v as { reason: string }).reason).toMatch(reason);
  });
  it('refuses a signing key without the whsec_ prefix', () => {
    expect(verifyStandardWebhook(body, headers(sig(body)), key.toString('base64'), ts).ok).toBe(false);
  });
});
