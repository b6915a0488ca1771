import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { startMoto, type MotoServer } from './moto';
import { motoClients, motoDynamo, type MotoClients } from './moto-fleet';

/** One moto for a test file, and its clients: filled before the file's tests, stopped after them. */
export interface FileMoto {
  /** The server; the same object for the whole file, filled in place when it starts. */
  readonly moto: MotoServer;
  /** Clients on it; the same object for the whole file, filled in place when it starts. */
  readonly c: MotoClients;
  /** A DynamoDB client on it: set when it starts, so read it inside a hook or test. */
  dynamo: DynamoDBClient;
}

/**
 * Registers the file's hooks: moto started before its tests and stopped after them, and, when
 * `eachTest` is given, reset before each test and then `eachTest` run on the clean server.
 * `moto` and `c` are filled in place rather than replaced, so a file may keep them in
 * constants at load (`const { moto, c } = motoForFile()`) before the server exists.
 */
export function motoForFile(eachTest?: (m: FileMoto) => Promise<void>): FileMoto {
  const m = { moto: {}, c: {} } as FileMoto;
  beforeAll(async () => {
    const server = await startMoto();
    Object.assign(m.moto, server);
    Object.assign(m.c, motoClients(server.endpoint));
    m.dynamo = motoDynamo(server.endpoint);
  });
  afterAll(async () => m.moto.stop?.());
  if (eachTest)
    beforeEach(async () => {
      await m.moto.reset();
      await eachTest(m);
    });
  return m;
}
