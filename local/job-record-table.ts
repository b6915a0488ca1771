import { UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { JOB_RECORD_ATTRIBUTES } from '../lambdas/shared/contract';
import { createJobRecordTable as createTable } from '../test/support/moto-fleet';
import { localDynamo } from './lambdas';

/** The per-job record table's name locally (deployed: CloudFormation names it). */
export function jobRecordTableName(prefix: string): string {
  return `${prefix}-job-records`;
}

/** The table as lib/job-records.ts declares it (the moto tests' helper), with its expiry as TTL. */
export async function createJobRecordTable(endpoint: string, name: string): Promise<void> {
  const dynamo = localDynamo(endpoint);
  try {
    await createTable(dynamo, name);
    await dynamo.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { Enabled: true, AttributeName: JOB_RECORD_ATTRIBUTES.expiresAt } }));
  } finally {
    dynamo.destroy();
  }
}
