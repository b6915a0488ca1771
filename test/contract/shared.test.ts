import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { buildFleetConfig, Provider } from '../../lambdas/shared/contract';
import { clearFleetConfigCache, loadFleetConfig } from '../../lambdas/shared/fleet-config-source';
import { createLogger, emitMetrics, rollups } from '../../lambdas/shared/log';

const config = buildFleetConfig({
  github: { appId: '1', organization: 'acme' },
  pools: [{ name: 'linux', provider: Provider.GITHUB, launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
});

describe('loadFleetConfig', () => {
  const ssm = mockClient(SSMClient);
  beforeEach(() => {
    ssm.reset();
    clearFleetConfigCache();
  });
  it('prefers the inline environment copy', async () => {
    expect(await loadFleetConfig(new SSMClient({}), { FLEET_CONFIG: JSON.stringify(config) })).toEqual(config);
    expect(ssm.calls()).toHaveLength(0);
  });
  it('hands out one object per config text, so per-config state (the CI providers and their caches) survives invocations', async () => {
    const env = { FLEET_CONFIG: JSON.stringify(config) };
    const first = await loadFleetConfig(new SSMClient({}), env);
    expect(await loadFleetConfig(new SSMClient({}), env)).toBe(first);
    ssm.on(GetParameterCommand, { Name: '/p/fleet/config' }).resolves({ Parameter: { Value: JSON.stringify(config) } });
    const param = { FLEET_CONFIG_PARAMETER: '/p/fleet/config' };
    const read = await loadFleetConfig(new SSMClient({}), param, 0);
    // Re-read after the cache period, unchanged: the same object.
    expect(await loadFleetConfig(new SSMClient({}), param, 61_000)).toBe(read);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
  });
  it('reads the parameter once per cache period', async () => {
    ssm.on(GetParameterCommand, { Name: '/p/fleet/config' }).resolves({ Parameter: { Value: JSON.stringify(config) } });
    const env = { FLEET_CONFIG_PARAMETER: '/p/fleet/config' };
    await loadFleetConfig(new SSMClient({}), env, 0);
    await loadFleetConfig(new SSMClient({}), env, 59_000);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(1);
    await loadFleetConfig(new SSMClient({}), env, 61_000);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
  });
  it('keys the cached copy by parameter name', async () => {
    const other = buildFleetConfig({ prefix: 'other', github: { appId: '2', organization: 'acme' }, pools: config.pools.map((p) => ({ ...p })) });
    ssm.on(GetParameterCommand, { Name: '/p/fleet/config' }).resolves({ Parameter: { Value: JSON.stringify(config) } });
    ssm.on(GetParameterCommand, { Name: '/other/fleet/config' }).resolves({ Parameter: { Value: JSON.stringify(other) } });
    expect((await loadFleetConfig(new SSMClient({}), { FLEET_CONFIG_PARAMETER: '/p/fleet/config' }, 0)).prefix).toBe(config.prefix);
    expect((await loadFleetConfig(new SSMClient({}), { FLEET_CONFIG_PARAMETER: '/other/fleet/config' }, 1)).prefix).toBe('other');
    expect((await loadFleetConfig(new SSMClient({}), { FLEET_CONFIG_PARAMETER: '/p/fleet/config' }, 2)).prefix).toBe(config.prefix);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
  });
  it('rejects invalid content and a missing setting with clear errors', async () => {
    await expect(loadFleetConfig(new SSMClient({}), { FLEET_CONFIG: '{"version":9}' })).rejects.toThrow(/invalid fleet config/);
    await expect(loadFleetConfig(new SSMClient({}), {})).rejects.toThrow(/FLEET_CONFIG/);
  });
});

describe('log', () => {
  it('writes one JSON object a line, child fields on every line', () => {
    const lines: string[] = [];
    const log = createLogger({ fn: 'scale-up' }, (l) => lines.push(l)).child({ traceId: 't-1' });
    log.info('claimed', { instanceId: 'i-1' });
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'info', message: 'claimed', fn: 'scale-up', traceId: 't-1', instanceId: 'i-1' });
  });
  it('emits EMF with the dimension set and metric names', () => {
    const lines: string[] = [];
    emitMetrics('NS', { Pool: 'linux' }, { WarmActivations: 2 }, 'Count', (l) => lines.push(l));
    const record = JSON.parse(lines[0]!);
    expect(record._aws.CloudWatchMetrics[0]).toEqual({ Namespace: 'NS', Dimensions: [['Pool'], []], Metrics: [{ Name: 'WarmActivations', Unit: 'Count' }] });
    expect(record).toMatchObject({ Pool: 'linux', WarmActivations: 2 });
  });
  it('publishes every dimension prefix, so alarms find per-pool and fleet-wide metrics', () => {
    expect(rollups(['Pool', 'Reason'])).toEqual([['Pool', 'Reason'], ['Pool'], []]);
    expect(rollups([])).toEqual([[]]);
  });
});
