import { describe, expect, it } from 'vitest';
import { LOCAL_SECOND_GITHUB_ORGANIZATION, LOCAL_SECOND_GITLAB_GROUP } from '../../local/provision';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * `npm run local -- --scopes`: one fleet serving two GitHub organisations (the second's pool has
 * the SAME labels, its own `organization`) and two GitLab groups, with two GitHub Apps sharing
 * the load. Each job is served by its own scope's pool, on a runner registered in its own
 * organisation or group (the loopback servers hand a runner only its scope's jobs, as GitHub
 * and GitLab do). After the first GitHub job the first App's rate-limit budgets are spent:
 * the later job is served through the second App, and the first is never answered again.
 */
describe('one fleet, several scopes', () => {
  it("serves each organisation's and group's jobs on its own pool and scope, through both Apps, on after one App is spent, and leaves nothing behind", { timeout: scaled(240_000) }, async () => {
    const { report, logs } = await runScenario({ scopes: true, jobs: 2, poolSize: 1, image: 'prebuilt', deadlineMs: scaled(180_000) });
    const why = JSON.stringify({ notes: report.notes, scopes: report.scopes, byApp: report.githubRequestsByApp, warnings: logs.filter((l) => /"level":"(warn|error)"/.test(l)) }).slice(0, 12_000);
    expect(report, why).toMatchObject({ jobs: 4, served: 4, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
    expect(report.parked).toEqual({ 'linux-x64': 1, 'gitlab-docker': 1, [LOCAL_SECOND_GITHUB_ORGANIZATION.pool]: 1, [LOCAL_SECOND_GITLAB_GROUP.pool]: 1 });
    const s = report.scopes!;
    expect(s.failures, why).toEqual([]);
    expect(s.github.map((j) => [j.scope, j.pool, j.runnerScope, j.served])).toEqual([
      ['example-org', 'linux-x64', 'org:example-org', true],
      [LOCAL_SECOND_GITHUB_ORGANIZATION.organization, LOCAL_SECOND_GITHUB_ORGANIZATION.pool, `org:${LOCAL_SECOND_GITHUB_ORGANIZATION.organization}`, true],
    ]);
    expect(s.gitlab.map((j) => [j.scope, j.pool, j.runnerScope, j.served])).toEqual([
      ['example-group/app', 'gitlab-docker', 'group_type:42', true],
      [LOCAL_SECOND_GITLAB_GROUP.project.path, LOCAL_SECOND_GITLAB_GROUP.pool, `group_type:${LOCAL_SECOND_GITLAB_GROUP.id}`, true],
    ]);
    // Both Apps were answered; after the first App was spent, the job after it was served through
    // the second, and the first was refused, never answered.
    const [first, second] = Object.keys(report.githubRequestsByApp!);
    expect(s.appsUsed).toEqual([first, second]);
    expect(s.exhaustion, why).toMatchObject({ appId: first, jobsBefore: 1, jobsAfter: 1, servedAfter: 1 });
    expect(s.exhaustion!.requestsAfter[first!]!.ok).toBe(0);
    expect(s.exhaustion!.requestsAfter[second!]!.ok).toBeGreaterThan(0);
    // Refused once per budget and Lambda, then skipped until its reset: not tried first on every call.
    expect(s.exhaustion!.requestsAfter[first!]!.refused).toBeLessThan(s.exhaustion!.requestsAfter[second!]!.ok);
    // Each served warm, by a parked instance.
    for (const j of [...s.github, ...s.gitlab]) expect(report.timeline.find((t) => t.ciJobId === j.ciJobId && t.pool === j.pool), why).toMatchObject({ served: 'warm' });
  });
});
