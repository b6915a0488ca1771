import { CreateTagsCommand, DescribeInstancesCommand, StartInstancesCommand } from '@aws-sdk/client-ec2';
import { GetParametersByPathCommand } from '@aws-sdk/client-ssm';
import { describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { Lines, PREFIX } from '../support/fixtures';
import { KEYS, motoFleet, parkInMoto } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const { c } = motoForFile(async () => {});

/** What a reusable instance writes on itself when it parks (the boot script's CreateTags). */
async function tagReused(ids: string[], uses: number, affinity = 'github:acme/app'): Promise<void> {
  await c.ec2.send(new CreateTagsCommand({ Resources: ids, Tags: [{ Key: KEYS.affinity, Value: affinity }, { Key: KEYS.uses, Value: String(uses) }] }));
}

async function states(ids: string[]): Promise<Record<string, string>> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ InstanceIds: ids }));
  return Object.fromEntries((out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((i) => [i.InstanceId!, i.State!.Name!]));
}

function run(config: FleetConfig, lines: Lines, now?: Date) {
  const aws = new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
  return createPoolHandler({ ...c, aws, loadConfig: async () => config, sink: lines.sink, ...(now ? { now: () => now } : {}) })();
}

async function configMarkers(): Promise<string[]> {
  const out = await c.ssm.send(new GetParametersByPathCommand({ Path: ssmPaths(PREFIX).runnerConfigRoot, Recursive: true }));
  return (out.Parameters ?? []).map((p) => p.Name!);
}

describe('reuse evictions against moto (real SDK, the pool eviction lock)', () => {
  it('evicts by use count and by age from the first launch, prefers fresh standbys over the target', { timeout: scaled(120_000) }, async () => {
    const reuse = { maxJobs: 3, maxAgeSeconds: 6 * 3600 };
    const config = await motoFleet(c, { warmSize: 2, reuse });
    const [kept, spent, parking, fresh] = await parkInMoto(c, config, 4);
    await tagReused([kept!, parking!], 1);
    await tagReused([spent!], 3);
    // On its way to park: running, not activated, with its affinity.
    await c.ec2.send(new StartInstancesCommand({ InstanceIds: [parking!] }));

    const lines = new Lines();
    const [first] = await run(config, lines);
    // spent: reuse-limit; then 3 kept for a target of 2: the fresh standby goes first.
    expect(first).toMatchObject({ target: 2, parked: 1, parkedReused: 1, priming: 1, launched: 0, evicted: { 'reuse-limit': 1, 'over-target': 1 } });
    expect(await states([kept!, spent!, parking!, fresh!])).toMatchObject({ [kept!]: 'stopped', [parking!]: 'running', [spent!]: expect.stringMatching(/shutting-down|terminated/), [fresh!]: expect.stringMatching(/shutting-down|terminated/) });
    expect(await configMarkers()).toEqual([]);

    // Hours later (moto keeps LaunchTime; the pool reads the first launch from the attach times):
    // past reuse.maxAge, within the warm max age of 24 h.
    const later = new Date(Date.now() + 7 * 3600_000);
    const [aged] = await run(config, new Lines(), later);
    expect(aged).toMatchObject({ evicted: { 'reuse-limit': 2 } });

    expect(await configMarkers()).toEqual([]);
  });

  it('evicts parked and parking reused instances as reuse-off when the pool no longer reuses', { timeout: scaled(120_000) }, async () => {
    const config = await motoFleet(c, { warmSize: 2 });
    const [parked, parking, fresh] = await parkInMoto(c, config, 3);
    await tagReused([parked!, parking!], 2);
    await c.ec2.send(new StartInstancesCommand({ InstanceIds: [parking!] }));
    const lines = new Lines();
    const [summary] = await run(config, lines);
    expect(summary).toMatchObject({ evicted: { 'reuse-off': 2 }, parked: 1, parkedReused: 0, launched: 1 });
    expect(await states([parked!, parking!, fresh!])).toMatchObject({ [fresh!]: 'stopped', [parked!]: expect.stringMatching(/shutting-down|terminated/), [parking!]: expect.stringMatching(/shutting-down|terminated/) });
    expect(lines.logs('evicted').map((l) => l.reason)).toEqual(['reuse-off', 'reuse-off']);
    expect(await configMarkers()).toEqual([]);
  });
});
