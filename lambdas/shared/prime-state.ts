import { GetParameterCommand, type GetParameterCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { decodeStreak, type PrimeStreak } from '../pool/backoff';
import { errorName, READ, type AwsCaller } from './aws-call';

/**
 * A pool's prime streak as stored (`SsmPaths.primeState`): undefined when none is stored (or
 * what is stored is not a streak), 'unreadable' with the error's name when SSM did not answer.
 * The pool writes it; the pool and scale-up read it, and both fail safe on 'unreadable'.
 */
export async function readPrimeStreak(aws: AwsCaller, ssm: SSMClient, name: string): Promise<PrimeStreak | undefined | { readonly unreadable: string }> {
  try {
    const out = await aws.send<GetParameterCommandOutput>(ssm, new GetParameterCommand({ Name: name }), READ);
    return decodeStreak(out.Parameter?.Value);
  } catch (error) {
    if (errorName(error) === 'ParameterNotFound') return undefined;
    return { unreadable: errorName(error) };
  }
}
