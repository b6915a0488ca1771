import { GetParameterCommand, ParameterNotFound, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { createSecretCache } from '../../lambdas/shared/secrets';

const ssm = mockClient(SSMClient);

describe('createSecretCache', () => {
  let now = 0;
  beforeEach(() => {
    ssm.reset();
    now = 0;
    ssm.on(GetParameterCommand).callsFake((input: { Name: string }) => ({ Parameter: { Value: `value-of-${input.Name}` } }));
  });
  const cache = (o: { ttlMs?: number; maxEntries?: number } = {}) => createSecretCache(new SSMClient({}), { ...o, now: () => now });

  it('reads a parameter once with decryption, shares concurrent reads, and re-reads after the TTL', async () => {
    const c = cache({ ttlMs: 1000 });
    expect(await Promise.all([c.get('/a'), c.get('/a'), c.find('/a')])).toEqual(['value-of-/a', 'value-of-/a', 'value-of-/a']);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(1);
    expect(ssm.commandCalls(GetParameterCommand)[0]!.args[0].input).toEqual({ Name: '/a', WithDecryption: true });
    now = 999;
    await c.get('/a');
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(1);
    now = 1000;
    await c.get('/a');
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
  });

  it('keeps at most maxEntries, dropping the least recently read', async () => {
    const c = cache({ maxEntries: 2 });
    await c.get('/a');
    await c.get('/b');
    await c.get('/a'); // /a is now the most recent
    await c.get('/c'); // evicts /b
    expect(c.size).toBe(2);
    const before = ssm.commandCalls(GetParameterCommand).length;
    await c.get('/a');
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(before);
    await c.get('/b');
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(before + 1);
  });

  it('tells a missing parameter (find: undefined, get: an error naming it) from a failing read, which is not cached', async () => {
    ssm.on(GetParameterCommand, { Name: '/missing' }).rejects(new ParameterNotFound({ message: 'not found', $metadata: {} }));
    ssm.on(GetParameterCommand, { Name: '/flaky' }).rejectsOnce(new Error('ThrottlingException')).resolves({ Parameter: { Value: 'ok' } });
    const c = cache();
    expect(await c.find('/missing')).toBeUndefined();
    await expect(c.get('/missing')).rejects.toThrow(/SSM parameter \/missing does not exist/);
    await expect(c.get('/flaky')).rejects.toThrow(/Throttling/);
    expect(await c.get('/flaky')).toBe('ok');
  });

  it('invalidate(name) makes the next read go to SSM (a rotated value), leaving other names cached', async () => {
    let version = 1;
    ssm.on(GetParameterCommand, { Name: '/rotated' }).callsFake(() => ({ Parameter: { Value: `v${version}` } }));
    const c = cache({ ttlMs: 60_000 });
    expect(await c.get('/rotated')).toBe('v1');
    await c.get('/other');
    version = 2;
    expect(await c.get('/rotated')).toBe('v1'); // cached until the TTL...
    c.invalidate('/rotated');
    expect(await c.get('/rotated')).toBe('v2'); // ...or until invalidated
    const reads = ssm.commandCalls(GetParameterCommand).length;
    await c.get('/other');
    c.invalidate('/never-read');
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(reads);
  });

  it('refuses an empty value without echoing anything', async () => {
    ssm.on(GetParameterCommand, { Name: '/empty' }).resolves({ Parameter: { Value: '' } });
    await expect(cache().get('/empty')).rejects.toThrow('SSM parameter /empty is empty');
  });
});
