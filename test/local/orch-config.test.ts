import { App } from 'aws-cdk-lib';
import { describe, expect, it } from 'vitest';
import { ExampleRunnersStack } from '../../bin/example-stack';
import { GitLabWebhookOwner, type FleetConfig, type PoolConfig } from '../../lambdas/shared/contract';
import { LOCAL_GITLAB_WEBHOOK_ID, LOCAL_SECOND_GITHUB_ORGANIZATION, LOCAL_SECOND_GITLAB_GROUP, localExample, localFleetConfig, localOverrides, localPoolTemplate } from '../../local/provision';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Provider } from '../../lambdas/shared/contract';

/**
 * The local fleet and the example app come from one props object: the FleetConfig the
 * example stack synthesizes and the one the local tool puts in moto differ only in the
 * overrides `localOverrides` lists (and in the placement: moto's template ids and subnet).
 */
const local = { poolSize: 3, githubApiUrl: 'http://127.0.0.1:1', gitlabUrl: 'http://127.0.0.1:2' };
const placement = () => ({ launchTemplateId: 'lt-local', launchTemplateVersion: '1', subnetIds: ['subnet-local'] });

function withoutPlacement(config: FleetConfig) {
  return {
    ...config,
    pools: config.pools.map(({ launchTemplateId: _a, launchTemplateVersion: _b, subnetIds: _c, ...rest }) => rest),
  };
}

describe('the local fleet config', () => {
  const deployed = new ExampleRunnersStack(new App(), 'Example').runners.config;
  const mine = localFleetConfig(localExample(), local, placement);

  it('is the example stack\'s, but for the loopback URLs, GitLab\'s webhook, the pool sizes and the dropped schedule', () => {
    const expected = withoutPlacement(deployed);
    const patched = {
      ...expected,
      github: { ...expected.github!, apiUrl: local.githubApiUrl },
      gitlab: { ...expected.gitlab!, url: local.gitlabUrl, webhook: { owner: GitLabWebhookOwner.GROUP, ownerId: expected.gitlab!.scopeId!, hookId: LOCAL_GITLAB_WEBHOOK_ID } },
      pools: expected.pools.map((p) => ({ ...p, warm: { ...p.warm, size: local.poolSize, schedule: [] } })),
    };
    expect(withoutPlacement(mine)).toEqual(patched);
  });

  it('places every pool on the local template and subnet', () => {
    for (const p of mine.pools as PoolConfig[]) expect(p).toMatchObject({ launchTemplateId: 'lt-local', launchTemplateVersion: '1', subnetIds: ['subnet-local'] });
  });

  it('changes nothing else in the props (the overrides are the whole list)', () => {
    const example = localExample();
    const o = localOverrides(example, local);
    expect({ ...o.github, apiUrl: undefined }).toEqual({ ...example.github, apiUrl: undefined });
    expect({ ...o.gitlab, url: undefined }).toEqual({ ...example.gitlab, url: undefined, webhookId: LOCAL_GITLAB_WEBHOOK_ID });
    o.pools.forEach((p, i) => {
      // Docker is dropped unless the run starts a daemon of its own (--docker).
      const { warm: w0, docker: _docker, ...rest0 } = example.pools[i]!;
      const { warm: w1, ...rest1 } = p;
      expect(rest1).toEqual(rest0);
      expect({ ...w1, size: undefined }).toEqual({ ...w0, size: undefined, schedule: undefined });
    });
  });

  it("keeps the pools' Docker only when the run starts a daemon of its own (--docker)", () => {
    const example = localExample();
    expect(example.pools.map((p) => p.docker !== undefined)).toEqual([true, true]);
    expect(localOverrides(example, local).pools.map((p) => p.docker)).toEqual([undefined, undefined]);
    expect(localOverrides(example, { ...local, docker: true }).pools.map((p) => p.docker)).toEqual(example.pools.map((p) => p.docker));
  });

  it('makes every pool follow the newest runner only for --roll (the GitLab pool opts in: its default is the pin)', () => {
    const example = localExample();
    expect(localFleetConfig(example, local, placement).pools.map((p) => [p.provider, p.runnerVersion === 'latest'])).toEqual([
      [Provider.GITHUB, true],
      [Provider.GITLAB, false],
    ]);
    expect(localFleetConfig(example, { ...local, followLatestRunner: true }, placement).pools.map((p) => p.runnerVersion)).toEqual(['latest', 'latest']);
    expect(localPoolTemplate(localOverrides(example, { ...local, followLatestRunner: true }).pools[1]!, undefined).followLatestRunner).toBe(true);
  });
});

describe('the local fleet of several scopes (--scopes)', () => {
  it("adds the GitHub pool's copy in the second organisation (same labels) and the GitLab pool's in the second group, and the config takes both", () => {
    const example = localExample();
    const config = localFleetConfig(example, { ...local, secondGitHubOrganization: true, secondGitLabGroup: true }, placement);
    const [github, gitlab] = example.pools;
    expect(config.pools.map((p) => [p.name, p.provider, [...p.labels]])).toEqual([
      [github!.name, Provider.GITHUB, github!.labels],
      [gitlab!.name, Provider.GITLAB, gitlab!.labels],
      [LOCAL_SECOND_GITHUB_ORGANIZATION.pool, Provider.GITHUB, github!.labels],
      [LOCAL_SECOND_GITLAB_GROUP.pool, Provider.GITLAB, LOCAL_SECOND_GITLAB_GROUP.labels],
    ]);
    const partner = localOverrides(example, { ...local, secondGitHubOrganization: true }).pools[2]!;
    const { name: _n, organization, warm: _w, docker: _d, ...rest } = partner;
    const { name: _n0, warm: _w0, docker: _d0, ...rest0 } = github!;
    expect(organization).toBe(LOCAL_SECOND_GITHUB_ORGANIZATION.organization);
    expect(rest).toEqual(rest0);
  });

  it('adds neither without its setting', () => {
    expect(localOverrides(localExample(), local).pools.map((p) => p.name)).toEqual(localExample().pools.map((p) => p.name));
  });
});

describe('a local pool template', () => {
  const pool = { name: 'p', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() };
  it('takes the pool\'s prepare commands under either name (the deprecated warm.prepareCommands too), none when it has none', () => {
    expect(localPoolTemplate({ ...pool, prepareCommands: ['echo a'] }, undefined).prepareCommands).toEqual(['echo a']);
    expect(localPoolTemplate({ ...pool, warm: { prepareCommands: ['echo b'] } }, undefined).prepareCommands).toEqual(['echo b']);
    // A GitHub pool without a pin follows the newest runner (the default).
    expect(localPoolTemplate(pool, undefined)).toEqual({ name: 'p', provider: Provider.GITHUB, followLatestRunner: true });
  });
});
