import { describe, expect, it } from 'vitest';
import type { GitHubRequest } from '../../local/ci/github-server';
import { buildScopesProof, formatScopesProof, rotationWave, type SentScopedJob } from '../../local/scopes-run';

/** The pure parts of `npm run local -- --scopes` (local/scopes-run.ts): the waves round the scopes, and the proof's rules. */

describe('rotationWave', () => {
  const targets = [{ pool: 'a' }, { pool: 'b' }];
  const free = (parked: Record<string, number>) => (pool: string) => parked[pool] ?? 0;

  it.each([
    ['both pools have one: one job each', { a: 1, b: 1 }, 0, 10, 2],
    ['the next target has none: nothing, to keep the alternation', { a: 0, b: 3 }, 0, 10, 0],
    ['from the second target on', { a: 0, b: 1 }, 1, 10, 1],
    ['as many rounds as both hold', { a: 2, b: 2 }, 0, 10, 4],
    ['one more on the pool with more, if it comes next', { a: 2, b: 1 }, 0, 10, 3],
    ['at most max', { a: 5, b: 5 }, 0, 3, 3],
  ])('%s', (_what, parked, next, max, wave) => {
    expect(rotationWave(targets, next, free(parked), max)).toBe(wave);
  });

  it('one target: as many as its pool holds', () => {
    expect(rotationWave([{ pool: 'a' }], 7, free({ a: 2 }), 5)).toBe(2);
  });
});

describe('buildScopesProof', () => {
  const org = { pool: 'linux-x64', scope: 'example-org', runnerScope: 'org:example-org' };
  const partner = { pool: 'linux-x64-partner', scope: 'example-partner', runnerScope: 'org:example-partner' };
  const group = { pool: 'gitlab-data', scope: 'group-43/etl', runnerScope: 'group_type:43' };
  const sent: SentScopedJob[] = [
    { provider: 'github', ciJobId: '1', target: org },
    { provider: 'gitlab', ciJobId: '5', target: group },
    { provider: 'github', ciJobId: '2', target: partner },
  ];
  const ran: Record<string, string> = { 'github 1': 'org:example-org', 'github 2': 'org:example-partner', 'gitlab 5': 'group_type:43' };
  const req = (appId: string, status: number): GitHubRequest => ({ method: 'GET', path: '/x', credential: 'installation', appId, status });
  const requests = [req('1', 200), req('2', 201), req('1', 403), req('2', 200)];
  const input = {
    sent,
    ranOn: (p: string, id: string) => ran[`${p} ${id}`],
    served: () => true,
    apps: ['1', '2'],
    requests,
    exhausted: { appId: '1', atRequest: 2, jobsBefore: 1 },
  };

  it('passes when every job ran on a runner of its own scope, both Apps were answered, and the spent App was only refused after', () => {
    const p = buildScopesProof(input);
    expect(p.failures).toEqual([]);
    expect(p.passed).toBe(true);
    expect(p.github.map((j) => [j.scope, j.pool, j.runnerScope])).toEqual([
      ['example-org', 'linux-x64', 'org:example-org'],
      ['example-partner', 'linux-x64-partner', 'org:example-partner'],
    ]);
    expect(p.exhaustion).toEqual({ appId: '1', jobsBefore: 1, jobsAfter: 1, servedAfter: 1, requestsAfter: { 1: { ok: 0, refused: 1 }, 2: { ok: 1, refused: 0 } } });
    expect(formatScopesProof(p).join('\n')).toMatch(/github job 2 of example-partner: pool linux-x64-partner, runner in org:example-partner/);
  });

  it.each([
    ['a job on a runner of another organisation', { ranOn: (p: string, id: string) => (id === '2' ? 'org:example-org' : ran[`${p} ${id}`]) }, /github job 2 of example-partner ran on a runner of org:example-org, not org:example-partner/],
    ['a job no runner took', { ranOn: (p: string, id: string) => (id === '5' ? undefined : ran[`${p} ${id}`]) }, /gitlab job 5 of group-43\/etl ran on a runner of no scope/],
    ['a job not served', { served: (_p: string, id: string) => id !== '2' }, /github job 2 of example-partner was not served/],
    ['an App never answered', { requests: [req('2', 200), req('2', 200), req('2', 200)] }, /App 1 made no request GitHub answered/],
    ['the spent App answered after', { requests: [...requests, req('1', 200)] }, /App 1 was answered 1 time\(s\) after its budgets were spent/],
    ['no other App answered after', { requests: [req('1', 200), req('2', 200), req('1', 403)] }, /no other App than 1 was answered/],
    ['no job after the spending', { exhausted: { appId: '1', atRequest: 2, jobsBefore: 2 } }, /no GitHub job was sent after App 1/],
  ])('fails on %s', (_what, change, message) => {
    const p = buildScopesProof({ ...input, ...change });
    expect(p.passed).toBe(false);
    expect(p.failures.join('\n')).toMatch(message);
  });
});
