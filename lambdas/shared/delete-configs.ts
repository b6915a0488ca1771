import { DeleteParameterCommand, DeleteParametersCommand, GetParameterCommand, type DeleteParametersCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { errorName, isUnknownOutcome, READ, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE, type AwsCaller } from './aws-call';
import type { SsmPaths } from './contract';
import { listRunnerConfigs } from './parameters';

/** Which config parameters are gone after a delete, and which are still there or unknown. */
export interface DeleteOutcome {
  readonly gone: ReadonlySet<string>;
  /** Not deleted (a definite refusal, or still listed when read back): the sweep retries. */
  readonly kept: ReadonlySet<string>;
}

/**
 * The calls the caller's role allows: scale-down holds `ssm:DeleteParameters` (10 names a
 * call), the pool and scale-up `ssm:DeleteParameter`; scale-down and the pool read back by
 * listing the config root (`ssm:GetParametersByPath`: names only, they may not read a
 * config), scale-up by `ssm:GetParameter`. Each role keeps the actions it has.
 */
export interface DeleteCalls {
  readonly delete: 'batch' | 'single';
  readonly readBack: 'list' | 'get';
  /**
   * The names belong to terminated instances, which nobody can claim again: a delete whose
   * answer was lost is resent (WRITE_IDEMPOTENT; not found afterwards is gone) before any
   * read-back. Only for names no writer can reuse.
   */
  readonly resend?: boolean;
}

const lost = (error: unknown) => error instanceof UnknownOutcomeError || isUnknownOutcome(error);

/**
 * Deletes runner config parameters (they hold a runner secret) and says which are gone.
 * A parameter that is not found is gone already: done. A delete whose answer was lost
 * (timeout, reset, 5xx) may have happened: it is resolved by reading back, never assumed
 * either way, and not by sending the delete again (WRITE_ONCE: only throttling, a definite
 * refusal, is retried) unless the caller says `resend` (a terminated instance's name, which
 * nobody can claim). Deleting by name is not idempotent otherwise: once the first delete has
 * removed an eviction marker or a stale claim, scale-up may claim the instance and write
 * its config under the same name, which a retry would delete. A name still there when read
 * back is left for the next run or the sweep.
 */
export async function deleteRunnerConfigs(aws: AwsCaller, ssm: SSMClient, paths: SsmPaths, names: readonly string[], calls: DeleteCalls): Promise<DeleteOutcome & { readonly errors: readonly string[] }> {
  const gone = new Set<string>();
  const kept = new Set<string>();
  const unknown = new Set<string>();
  const errors: string[] = [];
  const unique = [...new Set(names)];
  const batches = calls.delete === 'batch' ? chunks(unique, 10) : unique.map((n) => [n]);
  for (const batch of batches) {
    try {
      if (calls.delete === 'batch') {
        const out = await aws.send<DeleteParametersCommandOutput>(ssm, new DeleteParametersCommand({ Names: batch }), calls.resend ? WRITE_IDEMPOTENT : WRITE_ONCE);
        // InvalidParameters lists the names SSM did not find: gone as well.
        for (const n of [...(out.DeletedParameters ?? []), ...(out.InvalidParameters ?? [])]) gone.add(n);
        for (const n of batch) if (!gone.has(n)) unknown.add(n);
      } else {
        await aws.send(ssm, new DeleteParameterCommand({ Name: batch[0]! }), calls.resend ? WRITE_IDEMPOTENT : WRITE_ONCE);
        gone.add(batch[0]!);
      }
    } catch (error) {
      if (errorName(error) === 'ParameterNotFound') batch.forEach((n) => gone.add(n));
      else {
        errors.push(errorName(error));
        for (const n of batch) (lost(error) ? unknown : kept).add(n);
      }
    }
  }
  if (unknown.size > 0) {
    try {
      const present = calls.readBack === 'list' ? new Set((await listRunnerConfigs(aws, ssm, paths)).map((p) => p.name)) : await stillThere(aws, ssm, unknown);
      for (const n of unknown) (present.has(n) ? kept : gone).add(n);
    } catch (error) {
      errors.push(errorName(error));
      for (const n of unknown) kept.add(n);
    }
  }
  return { gone, kept, errors };
}

/** The names GetParameter still finds (without decrypting: the value is not needed). */
async function stillThere(aws: AwsCaller, ssm: SSMClient, names: ReadonlySet<string>): Promise<Set<string>> {
  const present = new Set<string>();
  for (const name of names) {
    try {
      await aws.send(ssm, new GetParameterCommand({ Name: name, WithDecryption: false }), READ);
      present.add(name);
    } catch (error) {
      if (errorName(error) !== 'ParameterNotFound') throw error;
    }
  }
  return present;
}

/** `items` in consecutive slices of at most `size` (the batch sizes of the AWS calls). */
export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
