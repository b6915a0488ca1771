import { describe, expect, it } from 'vitest';
import { LOCAL_SECOND_GITLAB_GROUP } from '../../local/provision';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * `npm run local -- --gitlab-groups`: GitLab pools in two groups of one fleet (pool
 * `gitlabGroupId`), the jobs alternating between a project of each. Each job is served by its
 * own group's pool, whose runner was registered in that group (the loopback hands a group
 * runner only its group's jobs, as GitLab does), and nothing is left in either group.
 */
describe('GitLab pools in two groups', () => {
  it("serves each group's job on a runner registered in that group, warm, and leaves nothing behind", { timeout: scaled(240_000) }, async () => {
    const { report, logs } = await runScenario({ gitlabGroups: true, jobs: 2, poolSize: 1, image: 'prebuilt', deadlineMs: scaled(180_000) });
    const why = JSON.stringify({ notes: report.notes, scopes: report.gitlabScopes, warnings: logs.filter((l) => /"level":"(warn|error)"/.test(l)) }).slice(0, 12_000);
    expect(report, why).toMatchObject({ jobs: 4, served: 4, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
    expect(report.parked).toEqual({ 'linux-x64': 1, 'gitlab-docker': 1, [LOCAL_SECOND_GITLAB_GROUP.pool]: 1 });
    expect(report.gitlabScopes).toEqual([
      expect.objectContaining({ pool: 'gitlab-docker', projectId: 4711, runnerScope: 'group_type:42' }),
      expect.objectContaining({ pool: LOCAL_SECOND_GITLAB_GROUP.pool, projectId: LOCAL_SECOND_GITLAB_GROUP.project.id, runnerScope: `group_type:${LOCAL_SECOND_GITLAB_GROUP.id}` }),
    ]);
    // Each served warm, by a parked instance (the runner scope above proves whose registration took it).
    for (const s of report.gitlabScopes!) expect(report.timeline.find((j) => j.provider === 'gitlab' && j.ciJobId === s.ciJobId), why).toMatchObject({ pool: s.pool, served: 'warm' });
  });
});
