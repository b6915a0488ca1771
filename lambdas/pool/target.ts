import { warmSizeAt, type PoolConfig } from '../shared/contract';

/**
 * The parked instances the pool keeps at `now`: the schedule's size, none while the pool is
 * paused (`maxRunners` 0). A paused pool starts no job, so its standbys could only age: they
 * are evicted as over the target on the pool's next run, and the pool refills when it resumes.
 * The FleetConfig lets a paused pool keep warm sizes above its maxRunners for that moment.
 */
export function warmTarget(pool: PoolConfig, now: Date): number {
  if (pool.maxRunners === 0) return 0;
  return warmSizeAt(pool.warm.size, pool.warm.schedule, now);
}
