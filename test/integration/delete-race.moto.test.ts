import { DeleteParameterCommand, GetParameterCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { deleteRunnerConfigs, type DeleteCalls } from '../../lambdas/shared/delete-configs';
import { PARAMETER_INSTANCE_TAG, ssmPaths } from '../../lambdas/shared/contract';
import { EVICTION_MARKER_PREFIX } from '../../lambdas/shared/parameters';
import { Lines, PREFIX } from '../support/fixtures';
import { motoFleet } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';

/**
 * Deletes by name racing a claim (docs/control-plane.md, "Windows still open"): the pool's
 * leftover-marker removal and the sweep's stale-claim removal delete a name they listed. If
 * the delete lands but its answer is lost, a scale-up claim may be written at the same name
 * before anyone looks again; a resent delete would remove that claim (and the config its
 * instance is about to read). Real SDK against moto; the answer is lost after the delete ran.
 */
const paths = ssmPaths(PREFIX);
const INSTANCE = 'i-0123456789abcdef0';
const NAME = paths.runnerConfig(INSTANCE);
const CLAIM = '{"fresh":"claim"}';
const { moto, c } = motoForFile(async () => {});

/** A scale-up claim: refuses to overwrite, as `claim.ts` writes it. */
const claim = () => c.ssm.send(new PutParameterCommand({ Name: NAME, Value: CLAIM, Type: 'SecureString', Overwrite: false, Tags: [{ Key: PARAMETER_INSTANCE_TAG, Value: INSTANCE }] }));
const marker = () => c.ssm.send(new PutParameterCommand({ Name: NAME, Value: `${EVICTION_MARKER_PREFIX}run-1\n`, Type: 'String', Overwrite: false, Tags: [{ Key: PARAMETER_INSTANCE_TAG, Value: INSTANCE }] }));
const current = async () => (await c.ssm.send(new GetParameterCommand({ Name: NAME, WithDecryption: true }))).Parameter?.Value;

/**
 * An SSM client whose first delete (of `command`) runs at moto, then a claim is written at the
 * same name, then the caller hears a reset. `sent()` counts the deletes sent.
 */
function losingDelete(command: 'DeleteParameterCommand' | 'DeleteParametersCommand'): SSMClient & { sent: () => number } {
  const ssm = new SSMClient({ endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 });
  let sent = 0;
  ssm.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== command) return next(args);
      if (sent++ > 0) return next(args);
      await next(args);
      await claim();
      throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
    },
    { step: 'initialize' },
  );
  return Object.assign(ssm, { sent: () => sent });
}

const aws = () => new AwsCaller({ sleep: async () => {} });

describe('a delete by name whose answer is lost, then a claim at the same name', () => {
  it('the pool: the leftover marker is removed once, the claim written after it survives', async () => {
    const config = await motoFleet(c, { warmSize: 0 });
    await marker();
    const ssm = losingDelete('DeleteParameterCommand');
    const lines = new Lines();
    // Past LEFTOVER_MARKER_MS: the marker is a leftover.
    const later = new Date(Date.now() + 30 * 60_000);
    await createPoolHandler({ ec2: c.ec2, ssm, aws: aws(), loadConfig: async () => config, now: () => later, sink: lines.sink })();
    expect(ssm.sent()).toBe(1);
    expect(await current()).toBe(CLAIM);
    // Read back, the name is still there: the pool does not count the marker as removed.
    expect(lines.json().some((r) => r.message === 'removing a leftover eviction marker' && r.removed === false)).toBe(true);
  });

  const shapes: [string, DeleteCalls, 'DeleteParameterCommand' | 'DeleteParametersCommand'][] = [
    ['the sweep (DeleteParameters, read back by listing)', { delete: 'batch', readBack: 'list' }, 'DeleteParametersCommand'],
    ['the pool (DeleteParameter, read back by listing)', { delete: 'single', readBack: 'list' }, 'DeleteParameterCommand'],
    ['scale-up (DeleteParameter, read back by GetParameter)', { delete: 'single', readBack: 'get' }, 'DeleteParameterCommand'],
  ];
  it.each(shapes)('%s: sent once, the claim survives and the name is reported kept, not gone', async (_, calls, command) => {
    await marker();
    const ssm = losingDelete(command);
    const outcome = await deleteRunnerConfigs(aws(), ssm, paths, [NAME], calls);
    expect(ssm.sent()).toBe(1);
    expect(await current()).toBe(CLAIM);
    expect(outcome.kept.has(NAME)).toBe(true);
    expect(outcome.gone.has(NAME)).toBe(false);
  });

  it('without the claim, the lost delete is read back as gone (the read-back decides, not the error)', async () => {
    await marker();
    const ssm = new SSMClient({ endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 });
    ssm.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName !== 'DeleteParameterCommand') return next(args);
        await next(args);
        throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
      },
      { step: 'initialize' },
    );
    const outcome = await deleteRunnerConfigs(aws(), ssm, paths, [NAME], { delete: 'single', readBack: 'get' });
    expect(outcome.gone.has(NAME)).toBe(true);
    await expect(c.ssm.send(new DeleteParameterCommand({ Name: NAME }))).rejects.toMatchObject({ name: 'ParameterNotFound' });
  });
});
