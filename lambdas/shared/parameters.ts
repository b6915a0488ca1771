import { randomUUID } from 'node:crypto';
import { GetParametersByPathCommand, type GetParametersByPathCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { READ, type AwsCaller } from './aws-call';
import type { SsmPaths } from './contract';

export interface ObservedParameter {
  readonly name: string;
  readonly instanceId: string;
  readonly lastModified: Date;
  /** The pool's eviction lock, not a runner config (see `evictionMarker`). */
  readonly evictionMarker?: boolean;
  /** The sweep's idle-stop lock, not a runner config (see `idleStopMarker`). */
  readonly idleStopMarker?: boolean;
  /** A marker's value (a String: readable in a listing); undefined for a config. */
  readonly markerValue?: string;
}

/**
 * The pool's eviction lock: not a runner config, so nothing can ever run from it. It is
 * written as a plain String (it holds no secret; every runner config is a SecureString), so
 * a listing without decryption tells a marker from a claim: that is how the pool resolves a
 * marker write whose answer was lost, with the read access it has. Each lock's value is its
 * own, so a run whose write was lost does not read an overlapping run's marker as its own.
 */
export const EVICTION_MARKER_PREFIX = 'evicting=';

/** The previous release's marker, the same for every lock (still recognised as a marker). */
export const EVICTION_MARKER = `${EVICTION_MARKER_PREFIX}1\n`;

export function evictionMarker(): string {
  return `${EVICTION_MARKER_PREFIX}${randomUUID()}\n`;
}

/**
 * The sweep's idle-stop lock (contract reuse.ts R2), written at the instance's config name like
 * the eviction marker and for the same reasons: a String (no secret; a listing reads it), with
 * Overwrite=false, so a job claim, an eviction and an idle-stop exclude one another. It names
 * its own run (a uuid: a run resolving a lost write never takes another's marker for its own)
 * and the activation and job it is for (R3). The config name is free while the instance runs:
 * the boot script deleted its config when it read it.
 */
export const IDLE_STOP_MARKER_PREFIX = 'idle-stop=';

/**
 * An idle-stop marker this much older than now belongs to no live sweep (the function's
 * timeout is 2 minutes, as the pool's, whose LEFTOVER_MARKER_MS it matches): its run died or
 * lost the delete's answer, and the next sweep removes it, so the instance does not stay
 * unclaimable once it parks.
 */
export const IDLE_STOP_LEFTOVER_MS = 5 * 60_000;

export function idleStopMarker(activatedAt: string, jobId: string): string {
  return `${IDLE_STOP_MARKER_PREFIX}${randomUUID()} activation=${activatedAt} job=${jobId}`;
}

/** Every runner config parameter (names and times only, never the values), paginated. */
export async function listRunnerConfigs(aws: AwsCaller, ssm: SSMClient, paths: SsmPaths): Promise<ObservedParameter[]> {
  const found: ObservedParameter[] = [];
  let token: string | undefined;
  do {
    const out = await aws.send<GetParametersByPathCommandOutput>(
      ssm,
      // WithDecryption false: the sweeps need names and times; the secrets stay encrypted.
      new GetParametersByPathCommand({ Path: paths.runnerConfigRoot, Recursive: false, WithDecryption: false, MaxResults: 10, ...(token ? { NextToken: token } : {}) }),
      READ,
    );
    for (const p of out.Parameters ?? []) {
      const instanceId = p.Name ? paths.instanceIdOf(p.Name) : undefined;
      if (p.Name && instanceId) {
        const evictionMarker = p.Type === 'String' && p.Value?.startsWith(EVICTION_MARKER_PREFIX) === true;
        const idleStopMarker = p.Type === 'String' && p.Value?.startsWith(IDLE_STOP_MARKER_PREFIX) === true;
        found.push({
          name: p.Name,
          instanceId,
          lastModified: p.LastModifiedDate ?? new Date(0),
          evictionMarker,
          ...(idleStopMarker ? { idleStopMarker } : {}),
          ...(evictionMarker || idleStopMarker ? { markerValue: p.Value } : {}),
        });
      }
    }
    token = out.NextToken;
  } while (token);
  return found;
}
