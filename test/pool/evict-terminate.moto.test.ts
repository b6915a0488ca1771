import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { GetParametersByPathCommand } from '@aws-sdk/client-ssm';
import { describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { ssmPaths } from '../../lambdas/shared/contract';
import { Lines, PREFIX } from '../support/fixtures';
import { motoClients, motoFleet, parkInMoto } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const { moto, c } = motoForFile(async () => {});

/** An EC2 client on moto whose every TerminateInstances runs and then loses its answer (a 503 after the fact). */
function losingTerminates() {
  const ec2 = motoClients(moto.endpoint).ec2;
  let sent = 0;
  ec2.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'TerminateInstancesCommand') return next(args);
      sent++;
      await next(args);
      throw Object.assign(new Error('ServiceUnavailable'), { name: 'ServiceUnavailable', $metadata: { httpStatusCode: 503 } });
    },
    { step: 'initialize' },
  );
  return { ec2, sent: () => sent };
}

describe('an eviction whose terminate answers are all lost, against moto', () => {
  it('is resolved by describing the instance: counted as evicted, its marker removed, nothing left', { timeout: scaled(60_000) }, async () => {
    const config = await motoFleet(c, { warmSize: 1 });
    const ids = await parkInMoto(c, config, 2);
    const { ec2, sent } = losingTerminates();
    const lines = new Lines();
    const aws = new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
    const [summary] = await createPoolHandler({ ...c, ec2, aws, loadConfig: async () => config, sink: lines.sink })();
    expect(sent()).toBe(6);
    expect(summary).toMatchObject({ target: 1, evicted: { 'over-target': 1 }, launched: 0 });
    const out = await c.ec2.send(new DescribeInstancesCommand({ InstanceIds: ids }));
    const states = (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((i) => i.State?.Name);
    expect(states.filter((s) => s === 'stopped')).toHaveLength(1);
    expect(states.filter((s) => s === 'shutting-down' || s === 'terminated')).toHaveLength(1);
    expect(lines.logs(/^terminate outcome unknown, resolved/)[0]).toMatchObject({ instances: 1, terminating: 1 });
    const left = await c.ssm.send(new GetParametersByPathCommand({ Path: ssmPaths(PREFIX).runnerConfigRoot, Recursive: true }));
    expect(left.Parameters ?? []).toEqual([]);
  });
});
