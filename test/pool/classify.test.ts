import { describe, expect, it } from 'vitest';
import { classify, planPool, staleImage, type InstanceClass } from '../../lambdas/pool/classify';
import { encodeParking, LAUNCH_TEMPLATE_VERSION_TAG, REUSE_DEFAULTS } from '../../lambdas/shared/contract';
import { observe, type ObservedInstance } from '../../lambdas/shared/instances';
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

describe('reuse (contract reuse.ts): reused instances in the pool', () => {
  const reusable = fleetConfig({ warmSize: 3, warmMaxAgeSeconds: 3600, primingTimeoutSeconds: 600, reuse: { maxJobs: 5, maxAgeSeconds: 6 * 3600 } }).pools[0]!;
  const reuseOff = fleetConfig({ warmSize: 3, warmMaxAgeSeconds: 3600, primingTimeoutSeconds: 600 }).pools[0]!;
  const hoursAgo = (h: number) => minutesAgo(h * 60);
  /** A reused parked instance: LaunchTime is its last job's start, firstLaunchTime its build. */
  const reused = (o: { affinity?: string; uses?: string; lastStart?: Date; built?: Date; state?: string; tags?: Record<string, string> } = {}): ObservedInstance => {
    const i = inst(o.state ?? 'stopped', {
      reason: o.state === undefined || o.state === 'stopped' ? 'Client.InstanceInitiatedShutdown' : undefined,
      launched: o.lastStart ?? minutesAgo(30),
      tags: {
        [KEYS.affinity]: o.affinity ?? 'github:acme/app',
        [KEYS.uses]: o.uses ?? '1',
        // On its way to park: the parking tag it wrote when its job ended, a minute ago.
        ...(o.state === 'running' || o.state === 'stopping' ? { [KEYS.parking]: encodeParking('2026-11-29T09:00:00.000Z', minutesAgo(1)) } : {}),
        ...o.tags,
      },
    });
    return { ...i, firstLaunchTime: o.built ?? hoursAgo(2) };
  };
  const fresh = (launched = minutesAgo(10)) => inst('stopped', { reason: 'Client.InstanceInitiatedShutdown', launched });

  it.each<[string, ObservedInstance, InstanceClass]>([
    ['stopped by its own power-off, with affinity and uses', reused(), 'parked'],
    ['running, not activated, with affinity: cleaning done, powering off', reused({ state: 'running' }), 'parking'],
    ['stopping, with affinity', reused({ state: 'stopping' }), 'parking'],
    ['an affinity that is no affinity', reused({ affinity: 'github:Acme App' }), 'garbage'],
    ['a use count that is no number', reused({ uses: 'many' }), 'garbage'],
    // Scale-up writes the affinity when it activates; `uses` comes when the instance parks.
    ['an affinity without a use count (activation rolled back before its first job)', { ...reused(), tags: new Map([...reused().tags].filter(([k]) => k !== KEYS.uses)) }, 'parked'],
    ['a parking tag of an activation that is over (R3: ignored)', reused({ tags: { [KEYS.parking]: '2026-11-29T11:00:00.000Z 2026-11-29T11:30:00.000Z' } }), 'parked'],
    ['activated again (claimed for a job of its affinity)', reused({ state: 'pending', tags: { [KEYS.activatedAt]: '2026-11-29T11:59:00.000Z' } }), 'active'],
  ])('classifies %s', (_name, i, expected) => {
    expect(classify(i, KEYS, false)).toBe(expected);
  });

  it('counts parked reused instances against the target like fresh ones', () => {
    const plan = planPool([reused(), reused({ affinity: 'github:acme/web' }), fresh()], new Set(), reusable, KEYS, 3, NOW);
    expect(plan).toMatchObject({ evictions: [], parked: 3, parkedReused: 2, launch: 0 });
    // One parking on its way back holds its place too: no launch for it.
    expect(planPool([reused(), reused({ state: 'running' })], new Set(), reusable, KEYS, 2, NOW)).toMatchObject({ evictions: [], parked: 1, priming: 1, launch: 0 });
  });

  type Row = [string, ObservedInstance, PoolConfigLike, string[]];
  type PoolConfigLike = typeof reusable;
  const rows: Row[] = [
    ['uses at maxJobs (the limit was lowered since it parked)', reused({ uses: '5' }), reusable, ['reuse-limit']],
    ['uses below maxJobs', reused({ uses: '4' }), reusable, []],
    ['built longer ago than reuse.maxAgeSeconds', reused({ built: hoursAgo(7) }), reusable, ['reuse-limit']],
    ['its last start recent but its build old: the build counts (EC2 moves LaunchTime on every start)', reused({ built: hoursAgo(7), lastStart: minutesAgo(5) }), reusable, ['reuse-limit']],
    ['older than warm.maxAgeSeconds but within reuse.maxAgeSeconds: the reuse bound applies, not the warm one', reused({ built: hoursAgo(5), lastStart: hoursAgo(2) }), reusable, []],
    ['in a pool whose reuse was switched off', reused(), reuseOff, ['reuse-off']],
    ['parking in a pool whose reuse was switched off', reused({ state: 'running' }), reuseOff, ['reuse-off']],
    ['an affinity of the other provider (no job of this pool has it)', reused({ affinity: 'gitlab:42' }), reusable, ['garbage']],
    ['parking long after its job started, its job ended a minute ago: kept', reused({ state: 'running', lastStart: hoursAgo(3) }), reusable, []],
    [
      'parking longer than the park window after its job ended',
      reused({ state: 'running', lastStart: hoursAgo(3), tags: { [KEYS.parking]: encodeParking('2026-11-29T09:00:00.000Z', minutesAgo(REUSE_DEFAULTS.parkSeconds / 60 + 1)) } }),
      reusable,
      ['priming-timeout'],
    ],
    ['running without activation nor parking tag, started long ago (never powers off)', { ...reused({ state: 'running', lastStart: hoursAgo(3) }), tags: new Map([...reused({ state: 'running' }).tags].filter(([k]) => k !== KEYS.parking)) }, reusable, ['priming-timeout']],
    [
      're-priming after a recent start (a rolled-back activation), its parking tag old: the priming bound from its start',
      reused({ state: 'running', lastStart: minutesAgo(5), tags: { [KEYS.parking]: encodeParking('2026-11-29T09:00:00.000Z', hoursAgo(2)) } }),
      reusable,
      [],
    ],
    ['parking past its reuse age', reused({ state: 'running', built: hoursAgo(7) }), reusable, ['reuse-limit']],
    ['of an older template version', reused({ tags: { [LAUNCH_TEMPLATE_VERSION_TAG]: '0' } }), reusable, ['stale-template']],
  ];
  it.each(rows)('evicts a reused instance %s', (_name, instance, pool, reasons) => {
    expect(planPool([instance], new Set(), pool, KEYS, 3, NOW).evictions.map((e) => e.reason)).toEqual(reasons);
  });

  it('keeps the warm max age for fresh standbys of a reusable pool', () => {
    expect(planPool([fresh(minutesAgo(61))], new Set(), reusable, KEYS, 3, NOW).evictions.map((e) => e.reason)).toEqual(['max-age']);
  });

  it('over the target: fresh standbys first (oldest first), then reused ones least recently used first, priming and parking last', () => {
    const f1 = fresh(minutesAgo(5));
    const f2 = fresh(minutesAgo(50));
    const lru = reused({ lastStart: hoursAgo(3), built: hoursAgo(4) });
    const mru = reused({ lastStart: minutesAgo(20), built: hoursAgo(5) });
    const parking = reused({ state: 'running', lastStart: hoursAgo(5) });
    const priming = inst('running', { launched: minutesAgo(2) });
    const all = [mru, parking, f1, lru, priming, f2];
    const order = (target: number) => planPool(all, new Set(), reusable, KEYS, target, NOW).evictions.map((e) => e.instance.id);
    expect(order(5)).toEqual([f2.id]);
    expect(order(4)).toEqual([f2.id, f1.id]);
    expect(order(2)).toEqual([f2.id, f1.id, lru.id, mru.id]);
    expect(order(0)).toEqual([f2.id, f1.id, lru.id, mru.id, parking.id, priming.id]);
  });

  it('never evicts a claimed reused instance (a job claim, an eviction or an idle-stop marker), whatever its limits', () => {
    const spent = reused({ uses: '99', built: hoursAgo(99) });
    const plan = planPool([spent, reused({ state: 'running' })], new Set([spent.id]), reuseOff, KEYS, 0, NOW);
    expect(plan.evictions.map((e) => e.instance.id)).not.toContain(spent.id);
    expect(plan.evictions.map((e) => e.reason)).toEqual(['reuse-off']);
  });

  it('reads a reused instance against a new image by its build, not its last start', () => {
    const published = { imageId: 'ami-0new', publishedAt: hoursAgo(1) };
    const oldImage = { ...reused({ lastStart: minutesAgo(10), built: hoursAgo(3) }), imageId: 'ami-0old' };
    const current = { ...fresh(minutesAgo(5)), imageId: 'ami-0new' };
    const plan = planPool([oldImage, current], new Set(), reusable, KEYS, 3, NOW, published);
    expect(plan.evictions.map((e) => [e.instance.id, e.reason])).toEqual([[oldImage.id, 'stale-image']]);
  });

  it('hands the prime streak the build time of parked reused instances, not their last start', () => {
    const r = reused({ lastStart: minutesAgo(1), built: hoursAgo(3) });
    expect(planPool([r], new Set(), reusable, KEYS, 3, NOW).parkedLaunchTimes).toEqual([hoursAgo(3)]);
  });
});

describe('observe: the first launch of an instance EC2 has started again', () => {
  const at = (iso: string) => new Date(iso);
  it.each<[string, Parameters<typeof observe>[0], Date | undefined]>([
    [
      'the root volume and primary interface attach times, earlier than LaunchTime',
      {
        InstanceId: 'i-1',
        LaunchTime: at('2026-11-29T11:00:00Z'),
        RootDeviceName: '/dev/xvda',
        BlockDeviceMappings: [
          { DeviceName: '/dev/sdf', Ebs: { AttachTime: at('2026-11-29T10:30:00Z') } },
          { DeviceName: '/dev/xvda', Ebs: { AttachTime: at('2026-11-29T08:00:05Z') } },
        ],
        NetworkInterfaces: [
          { Attachment: { DeviceIndex: 1, AttachTime: at('2026-11-29T07:00:00Z') } },
          { Attachment: { DeviceIndex: 0, AttachTime: at('2026-11-29T08:00:01Z') } },
        ],
      },
      at('2026-11-29T08:00:01Z'),
    ],
    ['only the root volume', { InstanceId: 'i-2', LaunchTime: at('2026-11-29T11:00:00Z'), RootDeviceName: '/dev/xvda', BlockDeviceMappings: [{ DeviceName: '/dev/xvda', Ebs: { AttachTime: at('2026-11-29T09:00:00Z') } }] }, at('2026-11-29T09:00:00Z')],
    ['never later than LaunchTime', { InstanceId: 'i-3', LaunchTime: at('2026-11-29T11:00:00Z'), NetworkInterfaces: [{ Attachment: { DeviceIndex: 0, AttachTime: at('2026-11-29T11:00:01Z') } }] }, at('2026-11-29T11:00:00Z')],
    ['no attachment: none (LaunchTime is all there is)', { InstanceId: 'i-4', LaunchTime: at('2026-11-29T11:00:00Z') }, undefined],
  ])('%s', (_name, instance, expected) => {
    expect(observe(instance).firstLaunchTime).toEqual(expected);
  });
});
