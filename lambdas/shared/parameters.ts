import { GetParametersByPathCommand, type GetParametersByPathCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { READ, type AwsCaller } from './aws-call';
import type { SsmPaths } from './contract';

export interface ObservedParameter {
  readonly name: string;
  readonly instanceId: string;
  readonly lastModified: Date;
  /** The pool's eviction lock, not a runner config (see `EVICTION_MARKER`). */
  readonly evictionMarker?: boolean;
}

/**
 * The value of the pool's eviction lock: not a runner config, so nothing can ever run from
 * it. It is written as a plain String (it holds no secret; every runner config is a
 * SecureString), so a listing without decryption tells a marker from a claim: that is how
 * the pool resolves a marker write whose answer was lost, with the read access it has.
 */
export const EVICTION_MARKER = 'evicting=1\n';

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
        const evictionMarker = p.Type === 'String' && p.Value === EVICTION_MARKER;
        found.push({ name: p.Name, instanceId, lastModified: p.LastModifiedDate ?? new Date(0), evictionMarker });
      }
    }
    token = out.NextToken;
  } while (token);
  return found;
}
