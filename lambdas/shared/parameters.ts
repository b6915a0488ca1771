import { GetParametersByPathCommand, type GetParametersByPathCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { READ, type AwsCaller } from './aws-call';
import type { SsmPaths } from './contract';

export interface ObservedParameter {
  readonly name: string;
  readonly instanceId: string;
  readonly lastModified: Date;
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
      if (p.Name && instanceId) found.push({ name: p.Name, instanceId, lastModified: p.LastModifiedDate ?? new Date(0) });
    }
    token = out.NextToken;
  } while (token);
  return found;
}
