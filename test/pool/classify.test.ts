import { describe, expect, it } from 'vitest';
import { classify, planPool, staleImage, type InstanceClass } from '../../lambdas/pool/classify';
import { LAUNCH_TEMPLATE_VERSION_TAG } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { fleetConfig, KEYS, standbyTags } from '../support/fixtures';

const NOW = new Date('2026-11-29T12:00:00.000Z');
const minutesAgo = (m: number) => new Date(NOW.getTime() - m * 60_000);
let serial = 0;
function inst(state: string, extra: { reason?: string; tags?: Record<string, string | undefined>; launched?: Date; spot?: string; image?: string } = {}): ObservedInstance {
  const tags = new Map(Object.entries({ ...standbyTags(), ...extra.tags }).filter((e): e is [string, string] => e[1] !== undefined));
  return {
    id: `i-${(++serial).toString(16).padStart(17, '0')}`,
    state,
    ...(extra.reason ? { stateReason: extra.reason } : {}),
    launchTime: extra.launched ?? minutesAgo(10),
    tags,
    ...(extra.spot ? { spotRequestId: extra.spot } : {}),
    ...(extra.image ? { imageId: extra.image } : {}),
  };
}

describe('classify', () => {
  const activated = { [KEYS.activatedAt]: '2026-11-29T11:00:00.000Z' };
  const cases: [string, ObservedInstance, boolean, InstanceClass][] = [
    ['stopped by its own power-off (EC2)', inst('stopped', { reason: 'Client.InstanceInitiatedShutdown' }), false, 'parked'],
    ['stopped, as moto reports every stop', inst('stopped', { reason: 'Client.UserInitiatedShutdown' }), false, 'parked'],
    ['stopped by a spot interruption', inst('stopped', { reason: 'Server.SpotInstanceShutdown' }), false, 'garbage'],
    ['stopped by an internal error', inst('stopped', { reason: 'Server.InternalError' }), false, 'garbage'],
    ['stopped without a reason', inst('stopped'), false, 'garbage'],
    ['pending', inst('pending'), false, 'priming'],
    ['running', inst('running'), false, 'priming'],
    ['stopping', inst('stopping'), false, 'priming'],
    ['parked but claimed', inst('stopped', { reason: 'Client.InstanceInitiatedShutdown' }), true, 'claimed'],
    ['priming but claimed', inst('running'), true, 'claimed'],
    ['activated and stopped', inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', tags: activated }), false, 'active'],
    ['activated and running', inst('running', { tags: activated }), false, 'active'],
    ['cold launched (job tag only)', inst('running', { tags: { [KEYS.warmStandby]: undefined, [KEYS.jobId]: 'github:1' } }), false, 'active'],
    ['no warm-standby tag', inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', tags: { [KEYS.warmStandby]: undefined } }), false, 'foreign'],
    ['warm-standby tag with another value', inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', tags: { [KEYS.warmStandby]: 'false' } }), false, 'foreign'],
    ['terminated', inst('terminated', { reason: 'Client.UserInitiatedShutdown' }), false, 'gone'],
    ['shutting-down', inst('shutting-down'), false, 'gone'],
  ];
  it.each(cases)('%s', (_name, i, claimed, expected) => {
    expect(classify(i, KEYS, claimed)).toBe(expected);
  });
});

describe('planPool', () => {
  const pool = fleetConfig({ warmSize: 3, warmMaxAgeSeconds: 3600, primingTimeoutSeconds: 600 }).pools[0]!;
  const parked = (launched = minutesAgo(10), tags: Record<string, string> = {}) => inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', launched, tags });

  it('launches up to the target and evicts nothing in a healthy pool', () => {
    const plan = planPool([parked(), inst('running')], new Set(), pool, KEYS, 3, NOW);
    expect(plan).toMatchObject({ evictions: [], launch: 1, parked: 1, priming: 1, target: 3 });
  });

  it('counts the instances serving jobs (warm activated or cold) and never evicts them', () => {
    const activated = inst('running', { tags: { [KEYS.activatedAt]: '2026-11-29T11:00:00.000Z' } });
    const cold = inst('running', { tags: { [KEYS.warmStandby]: undefined, [KEYS.jobId]: 'github:7' } });
    const plan = planPool([parked(), activated, cold, inst('terminated', { tags: { [KEYS.jobId]: 'github:8' } })], new Set(), pool, KEYS, 1, NOW);
    expect(plan).toMatchObject({ evictions: [], active: 2, parked: 1 });
  });

  type Row = [string, ObservedInstance[], number, string[], number];
  const old = parked(minutesAgo(61));
  const stale = parked(minutesAgo(5), { [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
  const stuck = inst('running', { launched: minutesAgo(11) });
  const spotGone = inst('stopped', { reason: 'Server.SpotInstanceShutdown' });
  const a = parked(minutesAgo(30));
  const b = parked(minutesAgo(20));
  const c = parked(minutesAgo(10));
  const p = inst('pending', { launched: minutesAgo(1) });
  const rows: Row[] = [
    ['older than the maximum age', [old], 3, ['max-age'], 3],
    ['built from an older template version', [stale], 3, ['stale-template'], 3],
    ['priming past its bound', [stuck], 3, ['priming-timeout'], 3],
    ['garbage', [spotGone], 3, ['garbage'], 3],
    ['over the target: oldest parked first', [c, a, b], 1, ['over-target', 'over-target'], 0],
    ['over the target: priming goes after every parked', [p, a], 0, ['over-target', 'over-target'], 0],
  ];
  it.each(rows)('evicts %s', (_name, instances, target, reasons, launch) => {
    const plan = planPool(instances, new Set(), pool, KEYS, target, NOW);
    expect(plan.evictions.map((e) => e.reason)).toEqual(reasons);
    expect(plan.launch).toBe(launch);
  });

  it('evicts the oldest when over the target, in age order', () => {
    const plan = planPool([c, a, b], new Set(), pool, KEYS, 1, NOW);
    expect(plan.evictions.map((e) => e.instance.id)).toEqual([a.id, b.id]);
    const withPriming = planPool([p, a], new Set(), pool, KEYS, 1, NOW);
    expect(withPriming.evictions.map((e) => e.instance.id)).toEqual([a.id]);
  });

  it('never evicts a claimed or an activated instance, whatever its age, template or state', () => {
    const claimedOld = parked(minutesAgo(600), { [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    const activatedOld = inst('stopped', { reason: 'Server.SpotInstanceShutdown', launched: minutesAgo(600), tags: { [KEYS.activatedAt]: 'x' } });
    const plan = planPool([claimedOld, activatedOld], new Set([claimedOld.id]), pool, KEYS, 0, NOW);
    expect(plan.evictions).toEqual([]);
    expect(plan.parked + plan.priming).toBe(0);
  });

  it('does not compare template versions when the pool follows $Latest', () => {
    const latest = fleetConfig({ launchTemplateVersion: '$Latest' }).pools[0]!;
    expect(planPool([stale], new Set(), latest, KEYS, 3, NOW).evictions).toEqual([]);
  });
});

describe('image evictions (an image parameter resolved at launch)', () => {
  const pool = fleetConfig({ warmSize: 3, warmMaxAgeSeconds: 3600, primingTimeoutSeconds: 600 }).pools[0]!;
  const published = { imageId: 'ami-0new', publishedAt: minutesAgo(5) };
  const parkedOn = (image: string | undefined, launched: Date) => inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', launched, ...(image ? { image } : {}) });

  it.each<[string, ObservedInstance, typeof published | undefined, boolean]>([
    ['older image, launched before it was published', parkedOn('ami-0old', minutesAgo(10)), published, true],
    ['the current image', parkedOn('ami-0new', minutesAgo(10)), published, false],
    ['older image, launched after the publication (resolved otherwise: never a loop)', parkedOn('ami-0old', minutesAgo(1)), published, false],
    ['older image, launched in the second of the publication (LaunchTime has whole seconds)', parkedOn('ami-0old', new Date(Math.floor(minutesAgo(5).getTime() / 1000) * 1000)), { imageId: 'ami-0new', publishedAt: new Date(Math.floor(minutesAgo(5).getTime() / 1000) * 1000 + 400) }, false],
    ['no image parameter, or it could not be read', parkedOn('ami-0old', minutesAgo(10)), undefined, false],
    ['no ImageId observed', parkedOn(undefined, minutesAgo(10)), published, false],
  ])('%s', (_name, instance, image, stale) => {
    expect(staleImage(instance, image)).toBe(stale);
  });

  it('evicts parked and priming instances of an older image, keeps the current ones and never a claimed or active one', () => {
    const old = parkedOn('ami-0old', minutesAgo(10));
    const current = parkedOn('ami-0new', minutesAgo(10));
    const primingOld = inst('running', { launched: minutesAgo(8), image: 'ami-0old' });
    const claimedOld = parkedOn('ami-0old', minutesAgo(10));
    const activeOld = inst('running', { launched: minutesAgo(10), image: 'ami-0old', tags: { [KEYS.activatedAt]: 'x' } });
    const plan = planPool([old, current, primingOld, claimedOld, activeOld], new Set([claimedOld.id]), pool, KEYS, 3, NOW, published);
    expect(plan.evictions.map((e) => [e.instance.id, e.reason])).toEqual([
      [primingOld.id, 'stale-image'],
      [old.id, 'stale-image'],
    ]);
    expect(plan).toMatchObject({ parked: 1, priming: 0, launch: 2 });
    // The same instances without a readable parameter: nothing goes for its image.
    expect(planPool([old, current, primingOld], new Set(), pool, KEYS, 3, NOW).evictions).toEqual([]);
  });

  it('keeps parked standbys of an older image serving until one of the current image has parked', () => {
    const olds = [parkedOn('ami-0old', minutesAgo(10)), parkedOn('ami-0old', minutesAgo(20))];
    const primingNew = inst('running', { launched: minutesAgo(1), image: 'ami-0new' });
    // Only a priming standby of the new image (it may never prime): the old ones stay and count.
    const waiting = planPool([...olds, primingNew], new Set(), pool, KEYS, 3, NOW, published);
    expect(waiting.evictions).toEqual([]);
    expect(waiting).toMatchObject({ parked: 2, priming: 1, launch: 0 });
    // One below target: the refill launches (with the new image) instead of evicting.
    expect(planPool(olds, new Set(), pool, KEYS, 3, NOW, published)).toMatchObject({ evictions: [], parked: 2, launch: 1 });
    // Past max age they go as any parked standby goes.
    const aged = parkedOn('ami-0old', new Date(NOW.getTime() - (pool.warm.maxAgeSeconds + 60) * 1000));
    expect(planPool([aged], new Set(), pool, KEYS, 3, NOW, published).evictions.map((e) => e.reason)).toEqual(['max-age']);
    // Once one of the new image has parked, the rest are replaced at once.
    const parkedNew = parkedOn('ami-0new', minutesAgo(1));
    const proven = planPool([...olds, parkedNew], new Set(), pool, KEYS, 3, NOW, published);
    expect(proven.evictions.map((e) => [e.instance.id, e.reason])).toEqual(olds.map((o) => [o.id, 'stale-image']));
    expect(proven).toMatchObject({ parked: 1, launch: 2 });
  });
});
