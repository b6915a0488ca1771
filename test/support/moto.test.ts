import { GetParameterCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { motoEnv, startMoto, type MotoServer } from './moto';

let moto: MotoServer;
beforeAll(async () => {
  moto = await startMoto();
});
afterAll(async () => {
  await moto?.stop();
});

it('serves SSM through the real SDK client and resets between tests', async () => {
  const env = motoEnv(moto.endpoint);
  const ssm = new SSMClient({ endpoint: env.AWS_ENDPOINT_URL, region: env.AWS_REGION, credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } });
  await ssm.send(new PutParameterCommand({ Name: '/t/p', Value: 'v', Type: 'SecureString' }));
  await expect(ssm.send(new PutParameterCommand({ Name: '/t/p', Value: 'w', Type: 'SecureString' }))).rejects.toMatchObject({ name: 'ParameterAlreadyExists' });
  const got = await ssm.send(new GetParameterCommand({ Name: '/t/p', WithDecryption: true }));
  expect(got.Parameter?.Value).toBe('v');
  await moto.reset();
  await expect(ssm.send(new GetParameterCommand({ Name: '/t/p' }))).rejects.toMatchObject({ name: 'ParameterNotFound' });
});
