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
  /** An eviction marker's value (a String: readable in a listing); undefined for a config. */
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
        found.push({ name: p.Name, instanceId, lastModified: p.LastModifiedDate ?? new Date(0), evictionMarker, ...(evictionMarker ? { markerValue: p.Value } : {}) });
      }
    }
    token = out.NextToken;
  } while (token);
  return found;
}
