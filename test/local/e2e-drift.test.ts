import { describe, expect, it } from 'vitest';
import { LAUNCH_TEMPLATE_VERSION_TAG } from '../../lambdas/shared/contract';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/** Drift: a new launch template version after the pools filled; old-version parked instances are evicted and replaced. */
describe('drift', () => {
  it('evicts the parked instances of the old template version, parks new ones, and the jobs run on those', { timeout: scaled(240_000) }, async () => {
    const { report, evictions, templateVersions, world } = await runScenario({ drift: true, jobs: 2, poolSize: 2, deadlineMs: scaled(180_000) });
    expect(report).toMatchObject({ jobs: 4, served: 4, warm: 4, unserved: 0, leftovers: 0, settled: true });
    expect(templateVersions).toEqual({ 'linux-x64': { before: '1', after: '2' }, 'gitlab-docker': { before: '1', after: '2' } });
    expect(evictions['stale-template']).toBe(4);
    const version = (id: string) => world.instances.find((i) => i.id === id)?.tags[LAUNCH_TEMPLATE_VERSION_TAG];
    for (const job of report.timeline) expect(version(job.instanceId!), job.job).toBe('2');
    // The old version's instances are all gone; every parked one is of the new version.
    const live = world.instances.filter((i) => i.state !== 'terminated');
    expect(live.length).toBe(4);
    expect(live.every((i) => i.state === 'stopped' && i.tags[LAUNCH_TEMPLATE_VERSION_TAG] === '2')).toBe(true);
    expect(world.instances.filter((i) => i.tags[LAUNCH_TEMPLATE_VERSION_TAG] === '1').every((i) => i.state === 'terminated')).toBe(true);
  });
});
