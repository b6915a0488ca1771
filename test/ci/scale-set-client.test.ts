import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders } from '../../lambdas/ci';
import { AdminTokens, githubConfigUrl, parseMessage, ScaleSetApiError, scaleSetApiFor, ScaleSetMessageError, type InstallationCaller } from '../../lambdas/ci/scale-set';
import {
  buildFleetConfig,
  Provider,
  QueueTokenExpiredError,
  SessionConflictError,
  SessionGoneError,
  ssmPaths,
  type FleetConfig,
  type ScaleSetApi,
  type ScaleSetMessage,
  type ScaleSetSession,
} from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';

const PREFIX = 'sst';
const ORG = 'acme';
const RUN_SH = resolve(__dirname, '../../local/runner/run.sh');
/** The environment templates/start-runner.sh gives the runner (`env -i` plus these). */
const BOOT_ENV = { HOME: tmpdir(), USER: 'nobody', LOGNAME: 'nobody', LANG: 'C.UTF-8', PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };
const SPEC = { name: 'arc-linux', runnerGroup: 'Default', labels: ['linux'] };
const ssm = mockClient(SSMClient);

let gh: LoopbackGitHub;
let config: FleetConfig;
/** The loopback's clock runs `skew` ms ahead of the wall clock (session idleness is judged by it). */
let skew = 0;

function fleet(pools: { name: string; organization?: string; repositories?: string[] }[] = [{ name: 'linux' }]): FleetConfig {
  const base = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: gh.url },
    pools: pools.map((p) => ({ provider: Provider.GITHUB, labels: ['linux'], ...base, ...p })),
  });
}

function github(): InstallationCaller {
  return createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github as unknown as InstallationCaller;
}

function api(pool = 'linux', fetchFn?: typeof fetch): ScaleSetApi {
  return scaleSetApiFor(config, config.pools.find((p) => p.name === pool)!, { github: github(), timeoutMs: 5_000, longPollTimeoutMs: 10_000, ...(fetchFn ? { fetch: fetchFn } : {}) });
}

async function rejection<E>(p: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(type);
  return e as E;
}

function runFake(jitconfig: string): Promise<number> {
  return new Promise((done, fail) => {
    const child = spawn(RUN_SH, ['--jitconfig', jitconfig], { env: BOOT_ENV, stdio: 'ignore' });
    child.on('error', fail);
    child.on('exit', (code) => done(code ?? -1));
  });
}

beforeEach(async () => {
  skew = 0;
  gh = await startLoopbackGitHub({
    organization: ORG,
    organizations: ['other'],
    jobSeconds: 0.2,
    runnerWaitSeconds: 5,
    runnerPollSeconds: 0.1,
    now: () => Date.now() + skew,
    scaleSet: { longPollSeconds: 0.3, sessionIdleSeconds: 60, runnerGroups: ['gpu-group'] },
  });
  config = fleet();
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
});
afterEach(async () => gh.close());

describe('scale-set client against the loopback GitHub', () => {
  it('exchanges the App credential once for the admin token and creates, reads, updates and deletes the scale set', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    expect(gh.scaleSets.list()).toMatchObject([{ id, name: 'arc-linux', scope: `org:${ORG}`, runnerGroupId: 1, labels: ['arc-linux', 'linux'] }]);
    expect(await client.ensureScaleSet(SPEC)).toEqual({ id });
    expect(await client.findScaleSet('ARC-linux', 'default')).toEqual({ id });
    expect(await client.findScaleSet('nope', 'Default')).toBeUndefined();
    expect(await client.findScaleSet('arc-linux', 'no-such-group')).toBeUndefined();
    // Labels changed: updated in place.
    expect(await client.ensureScaleSet({ ...SPEC, labels: ['linux', 'x64', 'self-hosted'] })).toEqual({ id });
    expect(gh.scaleSets.list()[0]!.labels).toEqual(['arc-linux', 'linux', 'x64']);
    // A named group is looked up.
    const gpu = await client.ensureScaleSet({ name: 'arc-gpu', runnerGroup: 'gpu-group', labels: [] });
    expect(gh.scaleSets.list().find((s) => s.id === gpu.id)?.runnerGroupId).toBe(2);
    await rejection(client.ensureScaleSet({ name: 'x', runnerGroup: 'missing', labels: [] }), ScaleSetApiError);
    await client.deleteScaleSet(id);
    await client.deleteScaleSet(id); // already gone: done
    expect(gh.scaleSets.list().map((s) => s.name)).toEqual(['arc-gpu']);
    const calls = gh.requests().map((r) => `${r.method} ${r.path}`);
    expect(calls.filter((c) => c.endsWith('/registration-token'))).toEqual([`POST /orgs/${ORG}/actions/runners/registration-token`]);
    expect(calls.filter((c) => c.endsWith('/actions/runner-registration'))).toHaveLength(1);
  });

  it('a repository pool has its scale set at the repository; its admin token reaches nothing of the organisation', async () => {
    config = fleet([{ name: 'linux' }, { name: 'repo', repositories: [`${ORG}/app`] }]);
    const org = await api('linux').ensureScaleSet(SPEC);
    const repo = api('repo');
    const { id } = await repo.ensureScaleSet(SPEC);
    expect(id).not.toBe(org.id);
    expect(gh.scaleSets.list().find((s) => s.id === id)?.scope).toBe(`${ORG}/app`);
    await rejection(repo.createSession(org.id, 'poller'), ScaleSetApiError);
  });

  it('a create whose answer was lost is resolved by reading the scale set back by name', async () => {
    let dropped = 0;
    const losing: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (init?.method === 'POST' && /runnerscalesets\?/.test(String(input)) && dropped++ === 0) {
        await res.text();
        throw new TypeError('fetch failed: socket hang up');
      }
      return res;
    };
    const { id } = await api('linux', losing).ensureScaleSet(SPEC);
    expect(dropped).toBe(1);
    expect(gh.scaleSets.list().map((s) => s.id)).toEqual([id]);
  });

  it('one session per scale set: a second is a SessionConflictError until the first is deleted', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller-1');
    expect(session).toMatchObject({ scaleSetId: id, statistics: { totalAssignedJobs: 0 } });
    const conflict = await rejection(client.createSession(id, 'poller-2'), SessionConflictError);
    expect(conflict.scaleSetId).toBe(id);
    const refreshed = await client.refreshSession(id, session.sessionId);
    expect(refreshed.sessionId).toBe(session.sessionId);
    expect(refreshed.messageQueueAccessToken).not.toBe(session.messageQueueAccessToken);
    await client.deleteSession(id, session.sessionId);
    await client.deleteSession(id, session.sessionId); // already gone: done
    expect((await client.createSession(id, 'poller-2')).sessionId).not.toBe(session.sessionId);
    expect(gh.scaleSets.list()[0]!.session?.owner).toBe('poller-2');
  });

  it('a session held by another owner conflicts; it expires once its owner stops polling for the bound', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    gh.scaleSets.holdSession(id, 'crashed-poller');
    await rejection(client.createSession(id, 'poller'), SessionConflictError);
    skew = 61_000; // the holder's last poll is older than the 60 s bound
    expect((await client.createSession(id, 'poller')).sessionId).toBeTruthy();
  });

  it('an expired queue token is a QueueTokenExpiredError until a refresh; an expired session is a SessionGoneError', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    let session = await client.createSession(id, 'poller');
    gh.scaleSets.expireQueueToken(id);
    await rejection(client.getMessage(session, 0, 5), QueueTokenExpiredError);
    await rejection(client.deleteMessage(session, 1), QueueTokenExpiredError);
    session = await client.refreshSession(id, session.sessionId);
    expect(await client.getMessage(session, 0, 5)).toBeUndefined();
    gh.scaleSets.expireSession(id);
    await rejection(client.getMessage(session, 0, 5), SessionGoneError);
    await rejection(client.refreshSession(id, session.sessionId), SessionGoneError);
  });

  it.each([400, 403, 404, 410])('a refresh refused with %i is a SessionGoneError (the source names no status for an expired session)', async (status) => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    gh.failNext({ method: 'PATCH', path: /\/sessions\/[0-9a-f-]+$/ }, status);
    await rejection(client.refreshSession(id, session.sessionId), SessionGoneError);
  });

  it.each([
    ['429', 429, 1],
    ['a 5xx twice', 503, 2],
    ['401 twice (the admin token exchanged again in between)', 401, 2],
  ])('a refresh answered %s is an error, not a gone session', async (_, status, times) => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    gh.failNext({ method: 'PATCH', path: /\/sessions\/[0-9a-f-]+$/ }, status, times);
    const e = await rejection(client.refreshSession(id, session.sessionId), ScaleSetApiError);
    expect(e.status).toBe(status);
  });

  it('a session answer without statistics is a session all the same (types.go: a pointer)', async () => {
    const stripping: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (!/\/sessions(\/|\?|$)/.test(String(input)) || res.status !== 200) return res;
      const { statistics: _dropped, ...rest } = (await res.json()) as Record<string, unknown>;
      return new Response(JSON.stringify(rest), { status: 200 });
    };
    const client = api('linux', stripping);
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    expect(session.sessionId).toBeTruthy();
    expect(session.statistics).toBeUndefined();
  });

  it('a repeated DELETE of a message whose first answer was lost takes a 404 as done', async () => {
    let deletes = 0;
    const lossy: typeof fetch = async (input, init) => {
      if (init?.method === 'DELETE' && /\/messages\/\d+$/.test(String(input))) {
        deletes++;
        // The first lands and its answer is lost; the second finds the message gone.
        if (deletes === 1) {
          await fetch(input, init);
          throw new TypeError('fetch failed');
        }
        return new Response(JSON.stringify({ typeName: 'MessageNotFoundException', message: 'gone' }), { status: 404 });
      }
      return fetch(input, init);
    };
    const client = api('linux', lossy);
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    await client.deleteMessage(session, 1);
    expect(deletes).toBe(2);
  });

  it('long-polls: undefined after the hold (202); an abort ends the poll with undefined', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    expect(await client.getMessage(session, 0, 3)).toBeUndefined();
    expect(gh.scaleSets.list()[0]!.session?.maxCapacity).toBe(3);
    const abort = new AbortController();
    const poll = client.getMessage(session, 0, 3, abort.signal);
    abort.abort();
    expect(await poll).toBeUndefined();
  });

  /** A loopback whose long poll holds `scaleSet`'s figures, a scale set on it and an open session. */
  const withLongHold = async (scaleSet: { longPollSeconds: number; sessionIdleSeconds?: number }) => {
    await gh.close();
    gh = await startLoopbackGitHub({ organization: ORG, now: () => Date.now() + skew, scaleSet });
    config = fleet();
    ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    return { client, id, session: await client.createSession(id, 'poller') };
  };
  const eventually = async (what: () => boolean) => {
    for (let i = 0; i < 600 && !what(); i++) await new Promise((r) => setTimeout(r, 100));
    expect(what()).toBe(true);
  };

  it('a poll its client abandoned ends at the service: the next poll is the only one in flight', async () => {
    // A hold far longer than the wait below, so only the closed connection can end the first poll.
    const { client, id, session } = await withLongHold({ longPollSeconds: 120 });
    const first = new AbortController();
    const poll = client.getMessage(session, 0, 3, first.signal);
    await eventually(() => gh.scaleSets.polls(id) === 1);
    first.abort();
    expect(await poll).toBeUndefined();
    await eventually(() => gh.scaleSets.polls(id) === 0);
    const second = new AbortController();
    const next = client.getMessage(session, 0, 3, second.signal);
    await eventually(() => gh.scaleSets.polls(id) === 1);
    expect(gh.scaleSets.peakPolls(id)).toBe(1);
    second.abort();
    await next;
  });

  it("a poll its client abandoned is no sign of life: the session's idle clock runs from the poll's start (review R5)", async () => {
    const { client, id, session } = await withLongHold({ longPollSeconds: 120, sessionIdleSeconds: 60 });
    const abandoned = new AbortController();
    const poll = client.getMessage(session, 0, 3, abandoned.signal);
    await eventually(() => gh.scaleSets.polls(id) === 1);
    // The client gives up 40 s into the poll; nothing is delivered for it.
    skew = 40_000;
    abandoned.abort();
    expect(await poll).toBeUndefined();
    await eventually(() => gh.scaleSets.polls(id) === 0);
    expect(gh.scaleSets.delivered()).toEqual([]);
    // 70 s after the poll's start (30 s after the close) the session has been idle past its 60 s bound.
    skew = 70_000;
    await rejection(client.getMessage(session, 0, 3), SessionGoneError);
  });

  it('a job for the scale set wakes the poll; an unacknowledged message is delivered again; an acknowledged one is not', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    gh.addJob(`${ORG}/app`, ['gpu']); // not the scale set's: none of its labels
    const poll = client.getMessage(session, 0, 5);
    const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'arc-linux', 'linux']);
    const first = (await poll)!;
    expect(first.statistics.totalAssignedJobs).toBe(1);
    expect(first.events).toEqual([]); // JobAssigned: counted in the statistics, not an event we act on
    expect(gh.scaleSets.assignedTo(job.id)).toBe(id);
    // Not acknowledged: the same message again for the same lastMessageId.
    expect((await client.getMessage(session, 0, 5))?.messageId).toBe(first.messageId);
    // The acknowledgement lost before it was applied: an error, and the message comes again.
    gh.failNext({ method: 'DELETE', path: /\/messages\/\d+$/ }, 503, 2);
    await rejection(client.deleteMessage(session, first.messageId), ScaleSetApiError);
    expect((await client.getMessage(session, 0, 5))?.messageId).toBe(first.messageId);
    expect(gh.scaleSets.delivered().map((d) => d.redelivery)).toEqual([false, true, true]);
    // Applied but its answer lost: the client asks again and is done; nothing comes again.
    gh.scaleSets.dropNextAck(id, 'after');
    await client.deleteMessage(session, first.messageId);
    expect(await client.getMessage(session, first.messageId, 5)).toBeUndefined();
  });

  it('a message delivered again carries the statistics it was made with; a refresh answers the fresh reading', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    let session = await client.createSession(id, 'poller');
    gh.addJob(`${ORG}/app`, ['arc-linux']);
    const first = (await client.getMessage(session, 0, 5))!;
    expect(first.statistics.totalAssignedJobs).toBe(1);
    gh.addJob(`${ORG}/app`, ['arc-linux']);
    // Not acknowledged: delivered again as it was made, though a second job is assigned now.
    const again = (await client.getMessage(session, 0, 5))!;
    expect(again.messageId).toBe(first.messageId);
    expect(again.statistics.totalAssignedJobs).toBe(1);
    session = await client.refreshSession(id, session.sessionId);
    expect(session.statistics?.totalAssignedJobs).toBe(2);
  });

  it('dropNextAck with a count: one lost answer is absorbed by the client asking again; two reach the caller', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    gh.addJob(`${ORG}/app`, ['arc-linux']);
    const m = (await client.getMessage(session, 0, 5))!;
    gh.scaleSets.dropNextAck(id, 'before', 2);
    await rejection(client.deleteMessage(session, m.messageId), ScaleSetApiError);
    expect((await client.getMessage(session, 0, 5))?.messageId).toBe(m.messageId);
    gh.scaleSets.dropNextAck(id, 'before');
    await client.deleteMessage(session, m.messageId);
    expect(await client.getMessage(session, m.messageId, 5)).toBeUndefined();
  });

  it('a runner started with the scale set JIT config takes the assigned job: job-started and job-completed messages follow', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const job = gh.addJob(`${ORG}/app`, ['arc-linux']);
    let session: ScaleSetSession = await client.createSession(id, 'poller');
    const jit = await client.generateJitConfig(id, 'sst-linux-i-0abc');
    expect(session.statistics?.totalAssignedJobs).toBe(1);
    expect(await runFake(jit.encodedJitConfig)).toBe(0);
    expect(gh.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'completed', conclusion: 'success', runnerName: 'sst-linux-i-0abc' });
    const seen: ScaleSetMessage[] = [];
    let last = 0;
    for (let m = await client.getMessage(session, last, 5); m; m = await client.getMessage(session, last, 5)) {
      seen.push(m);
      await client.deleteMessage(session, m.messageId);
      last = m.messageId;
    }
    const events = seen.flatMap((m) => m.events);
    expect(events).toEqual([
      { kind: 'started', runnerName: 'sst-linux-i-0abc', runnerId: jit.runnerId, jobId: String(job.id) },
      { kind: 'completed', runnerName: 'sst-linux-i-0abc', runnerId: jit.runnerId, jobId: String(job.id), result: 'succeeded' },
    ]);
    expect(seen.map((m) => m.messageId)).toEqual([...seen.map((m) => m.messageId)].sort((a, b) => a - b));
    expect(seen.at(-1)!.statistics).toMatchObject({ totalAssignedJobs: 0, totalRunningJobs: 0 });
    // The runner name is taken while registered: the service refuses a second one.
    await client.generateJitConfig(id, 'sst-linux-i-0def');
    await rejection(client.generateJitConfig(id, 'sst-linux-i-0def'), ScaleSetApiError);
    session = await client.refreshSession(id, session.sessionId);
    expect(session.statistics?.totalRegisteredRunners).toBe(1);
  });
});

describe('the loopback scale-set service refuses what GitHub refuses', () => {
  async function admin(): Promise<{ url: string; token: string }> {
    const { id: _ } = await api().ensureScaleSet(SPEC);
    const tokens = new AdminTokens({
      apiUrl: gh.url,
      configUrl: `${gh.url}/${ORG}`,
      registrationToken: async () => ((await github().installationRequest('t', 'POST /orgs/{org}/actions/runners/registration-token', { org: ORG }, ORG)).data as { token: string }).token,
      fetch,
      timeoutMs: 5_000,
      now: Date.now,
    });
    return tokens.get();
  }
  const call = (url: string, init: RequestInit = {}) => fetch(url, init).then(async (r) => ({ status: r.status, text: await r.text() }));

  it('the registration exchange: RemoteAuth with a live registration token of the scope named', async () => {
    const body = JSON.stringify({ url: `${gh.url}/${ORG}`, runner_event: 'register' });
    expect((await call(`${gh.url}/actions/runner-registration`, { method: 'POST', body })).status).toBe(401);
    expect((await call(`${gh.url}/actions/runner-registration`, { method: 'POST', body, headers: { authorization: 'RemoteAuth nope' } })).status).toBe(401);
    const reg = ((await github().installationRequest('t', 'POST /orgs/{org}/actions/runners/registration-token', { org: ORG }, ORG)).data as { token: string }).token;
    const other = JSON.stringify({ url: `${gh.url}/other`, runner_event: 'register' });
    expect((await call(`${gh.url}/actions/runner-registration`, { method: 'POST', body: other, headers: { authorization: `RemoteAuth ${reg}` } })).status).toBe(404);
    const ok = await call(`${gh.url}/actions/runner-registration`, { method: 'POST', body, headers: { authorization: `RemoteAuth ${reg}` } });
    expect(ok.status).toBe(201);
    expect(JSON.parse(ok.text)).toMatchObject({ url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/_actions\/\w+\/$/), token: expect.any(String) });
  });

  it('admin calls: api-version required and exact, the admin token required and live, scale sets of the token scope only', async () => {
    const { url, token } = await admin();
    const auth = { authorization: `Bearer ${token}` };
    const sets = `${url}_apis/runtime/runnerscalesets`;
    expect((await call(sets, { headers: auth })).status).toBe(400);
    expect((await call(`${sets}?api-version=7.1`, { headers: auth })).status).toBe(400);
    expect((await call(`${sets}?api-version=6.0-preview`)).status).toBe(401);
    expect((await call(`${sets}?api-version=6.0-preview`, { headers: { authorization: 'Bearer x.y.z' } })).status).toBe(401);
    expect((await call(`${sets}?api-version=6.0-preview`, { headers: auth })).status).toBe(200);
    expect((await call(`${sets}/999?api-version=6.0-preview`, { headers: auth })).status).toBe(404);
    expect((await call(`${sets}/1/sessions?api-version=6.0-preview`, { method: 'POST', headers: auth, body: '{}' })).status).toBe(400);
    expect((await call(`${sets}?api-version=6.0-preview`, { method: 'POST', headers: auth, body: JSON.stringify({ name: 'n', runnerGroupId: 77, labels: [{ name: 'n' }] }) })).status).toBe(404);
    expect((await call(`${sets}?api-version=6.0-preview`, { method: 'POST', headers: auth, body: JSON.stringify({ name: 'arc-linux', runnerGroupId: 1, labels: [{ name: 'arc-linux' }] }) })).status).toBe(409);
  });

  it('the message queue: api-version in Accept, the live queue token, a count in X-ScaleSetMaxCapacity', async () => {
    const client = api();
    const { id } = await client.ensureScaleSet(SPEC);
    const session = await client.createSession(id, 'poller');
    const accept = 'application/json; api-version=6.0-preview';
    const q = session.messageQueueUrl;
    expect((await call(q, { headers: { authorization: `Bearer ${session.messageQueueAccessToken}` } })).status).toBe(400);
    expect((await call(q, { headers: { accept } })).status).toBe(401);
    expect((await call(q, { headers: { accept, authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await call(q, { headers: { accept, authorization: `Bearer ${session.messageQueueAccessToken}`, 'x-scalesetmaxcapacity': 'many' } })).status).toBe(400);
    expect((await call(`${q}?lastMessageId=x`, { headers: { accept, authorization: `Bearer ${session.messageQueueAccessToken}` } })).status).toBe(400);
    expect((await call(q, { headers: { accept, authorization: `Bearer ${session.messageQueueAccessToken}` } })).status).toBe(202);
  });

  it('a job assigned to a scale set is taken by none of the REST-registered runners', async () => {
    const { id } = await api().ensureScaleSet(SPEC);
    const job = gh.addJob(`${ORG}/app`, ['arc-linux']);
    expect(gh.scaleSets.assignedTo(job.id)).toBe(id);
    const provider = createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github!;
    const reg = await provider.createRunner(
      { schemaVersion: 1, provider: Provider.GITHUB, jobId: `github:${job.id}`, providerJobId: String(job.id), pool: 'linux', owner: ORG, project: 'app', labels: ['arc-linux'], labelsResolved: true, traceId: 't', deliveryId: 'd', receivedAt: new Date().toISOString() } as never,
      'i-0123456789abcdef0',
      'linux',
    );
    const registered = gh.runners().find((r) => r.name === reg.name)!;
    // The REST runner would take a job with its labels; this one is the scale set's.
    expect(registered.labels).not.toContain('arc-linux');
    expect(gh.jobs().find((j) => j.id === job.id)?.status).toBe('queued');
  });
});

describe('message parsing and configuration URLs', () => {
  const stats = { totalAvailableJobs: 0, totalAcquiredJobs: 0, totalAssignedJobs: 2, totalRunningJobs: 1, totalRegisteredRunners: 1, totalBusyRunners: 1, totalIdleRunners: 0 };
  const msg = (over: Record<string, unknown>) => JSON.stringify({ messageId: 7, messageType: 'RunnerScaleSetJobMessages', body: '[]', statistics: stats, ...over });

  it('keeps job-started and job-completed, passes over job-assigned and unknown types', () => {
    const body = JSON.stringify([
      { messageType: 'JobAssigned', jobId: 'a' },
      { messageType: 'JobStarted', jobId: 'a', runnerId: 3, runnerName: 'r' },
      { messageType: 'SomethingNew', x: 1 },
      { messageType: 'JobCompleted', jobId: 'a', runnerId: 3, runnerName: 'r', result: 'failed' },
    ]);
    expect(parseMessage(`\uFEFF${msg({ body })}`)).toEqual({
      messageId: 7,
      statistics: stats,
      events: [
        { kind: 'started', jobId: 'a', runnerId: 3, runnerName: 'r' },
        { kind: 'completed', jobId: 'a', runnerId: 3, runnerName: 'r', result: 'failed' },
      ],
    });
  });

  it('statistics need only totalAssignedJobs: the other counts default to 0, as Go decodes an absent field', () => {
    expect(parseMessage(msg({ statistics: { totalAssignedJobs: 3 } })).statistics).toEqual({ ...Object.fromEntries(Object.keys(stats).map((k) => [k, 0])), totalAssignedJobs: 3 });
  });

  it('anything but the documented shape is a clear error', () => {
    expect(() => parseMessage('<html>')).toThrow(ScaleSetMessageError);
    expect(() => parseMessage(msg({ messageType: 'Other' }))).toThrow(/message type "Other"/);
    expect(() => parseMessage(msg({ statistics: { ...stats, totalAssignedJobs: -1 } }))).toThrow(/totalAssignedJobs/);
    expect(() => parseMessage(msg({ statistics: undefined }))).toThrow(/no statistics/);
    expect(() => parseMessage(msg({ statistics: { totalIdleRunners: 1 } }))).toThrow(/totalAssignedJobs/);
    expect(() => parseMessage(msg({ body: '{}' }))).toThrow(/not an array/);
    expect(() => parseMessage(msg({ body: 'nope' }))).toThrow(/body is not JSON/);
    expect(() => parseMessage(msg({ body: JSON.stringify([{ messageType: 'JobStarted', jobId: 'a' }]) }))).toThrow(/lacks runnerName/);
  });

  it('the configuration URL of a scope, from the REST API URL', () => {
    const org = { organization: 'acme' };
    expect(githubConfigUrl('https://api.github.com', org)).toBe('https://github.com/acme');
    expect(githubConfigUrl('https://api.octo.ghe.com/', { repository: 'a/b' })).toBe('https://octo.ghe.com/a/b');
    expect(githubConfigUrl('https://ghes.example.com/api/v3', org)).toBe('https://ghes.example.com/acme');
    expect(githubConfigUrl('http://127.0.0.1:4000', org)).toBe('http://127.0.0.1:4000/acme');
  });
});
