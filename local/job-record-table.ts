import { ScanCommand, UpdateTimeToLiveCommand, type ScanCommandOutput } from '@aws-sdk/client-dynamodb';
import { JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_KEY_PREFIX } from '../lambdas/shared/contract';
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

/**
 * The launch tickets the table holds that have not expired: slots a launch spent (a launch that
 * happened keeps its ticket until its expiry, by design) or kept as undecided. Listed, not taken
 * from the functions' bookkeeping; moto's TTL deletes nothing, so the expiry is compared here.
 */
export async function liveLaunchTickets(endpoint: string, table: string, now = Date.now()): Promise<number> {
  const dynamo = localDynamo(endpoint);
  let live = 0;
  try {
    let start: ScanCommandOutput['LastEvaluatedKey'];
    do {
      const out: ScanCommandOutput = await dynamo.send(new ScanCommand({ TableName: table, ConsistentRead: true, ...(start ? { ExclusiveStartKey: start } : {}) }));
      for (const item of out.Items ?? []) {
        const expires = Number(item[JOB_RECORD_ATTRIBUTES.expiresAt]?.N ?? '0');
        if (item[JOB_RECORD_ATTRIBUTES.key]?.S?.startsWith(LAUNCH_TICKET_KEY_PREFIX) && expires * 1000 > now) live++;
      }
      start = out.LastEvaluatedKey;
    } while (start);
  } finally {
    dynamo.destroy();
  }
  return live;
}
