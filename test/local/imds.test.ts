/**
 * The loopback IMDSv2 server (local/instances/imds.ts) over HTTP: the token exchange as the
 * EC2 user guide ("Use IMDSv2") describes it, and what it answers without one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImdsServer } from '../../local/instances/imds';

let clock = 1_000_000;
let server: ImdsServer;
let url: string;

beforeAll(async () => {
  server = new ImdsServer({ clock: () => clock, liveTags: () => Promise.resolve({ Name: 'played', 'a b': 'spaced' }) });
  server.state.instanceId = 'i-0123456789abcdef0';
  url = await server.listen();
});

afterAll(() => server.close());

const TTL = 'x-aws-ec2-metadata-token-ttl-seconds';

async function token(ttl = '60'): Promise<string> {
  const res = await fetch(`${url}/latest/api/token`, { method: 'PUT', headers: { [TTL]: ttl } });
  expect(res.status).toBe(200);
  return res.text();
}

describe('ImdsServer', () => {
  it.each([
    ['GET without a token', 'GET', '/latest/meta-data/instance-id', {}, 401],
    ['GET with an unknown token', 'GET', '/latest/meta-data/instance-id', { 'x-aws-ec2-metadata-token': 'forged' }, 401],
    ['PUT token without a TTL', 'PUT', '/latest/api/token', {}, 400],
    ['PUT token with a TTL of 0', 'PUT', '/latest/api/token', { [TTL]: '0' }, 400],
    ['PUT token with a TTL over 6 hours', 'PUT', '/latest/api/token', { [TTL]: '21601' }, 400],
    ['PUT token with a TTL that is no number', 'PUT', '/latest/api/token', { [TTL]: 'soon' }, 400],
    ['GET of the token path', 'GET', '/latest/api/token', { [TTL]: '60' }, 405],
    ['POST of a metadata path', 'POST', '/latest/meta-data/instance-id', {}, 405],
  ] as const)('%s', async (_what, method, path, headers, status) => {
    const res = await fetch(`${url}${path}`, { method, headers });
    expect(res.status).toBe(status);
  });

  it.each([
    ['/latest/meta-data/instance-id', 200, 'i-0123456789abcdef0'],
    ['/latest/meta-data/placement/region', 200, 'us-east-1'],
    ['/latest/meta-data/tags/instance', 200, 'Name\na b'],
    ['/latest/meta-data/tags/instance/a%20b', 200, 'spaced'],
    ['/latest/meta-data/tags/instance/missing', 404, 'Not Found'],
    ['/latest/meta-data/no-such-path', 404, 'Not Found'],
  ] as const)('with a token, GET %s: %i', async (path, status, body) => {
    const res = await fetch(`${url}${path}`, { headers: { 'x-aws-ec2-metadata-token': await token() } });
    expect([res.status, await res.text()]).toEqual([status, body]);
  });

  it('answers a token with its TTL, and refuses the token once the TTL has passed', async () => {
    const res = await fetch(`${url}/latest/api/token`, { method: 'PUT', headers: { [TTL]: '30' } });
    expect(res.headers.get(TTL)).toBe('30');
    const t = await res.text();
    const get = () => fetch(`${url}/latest/meta-data/instance-id`, { headers: { 'x-aws-ec2-metadata-token': t } }).then((r) => r.status);
    clock += 29_999;
    expect(await get()).toBe(200);
    clock += 1;
    expect(await get()).toBe(401);
    // A new token works again.
    expect((await fetch(`${url}/latest/meta-data/instance-id`, { headers: { 'x-aws-ec2-metadata-token': await token() } })).status).toBe(200);
  });
});
