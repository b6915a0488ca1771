import { CreateTableCommand, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { JOB_RECORD_ATTRIBUTES } from '../lambdas/shared/contract';
import { localDynamo } from './lambdas';

/** The per-job record table's name locally (deployed: CloudFormation names it). */
export function jobRecordTableName(prefix: string): string {
  return `${prefix}-job-records`;
}

/** The table as lib/job-records.ts declares it: the record key as hash key, on demand, the expiry as TTL. */
export async function createJobRecordTable(endpoint: string, name: string): Promise<void> {
  const dynamo = localDynamo(endpoint);
  try {
    await dynamo.send(
      new CreateTableCommand({
        TableName: name,
        KeySchema: [{ AttributeName: JOB_RECORD_ATTRIBUTES.key, KeyType: 'HASH' }],
        AttributeDefinitions: [{ AttributeName: JOB_RECORD_ATTRIBUTES.key, AttributeType: 'S' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );
    await dynamo.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { Enabled: true, AttributeName: JOB_RECORD_ATTRIBUTES.expiresAt } }));
  } finally {
    dynamo.destroy();
  }
}
