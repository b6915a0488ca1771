import { describe, expect, it } from 'vitest';
import { githubJobFor, gitlabJobFor, type GitHubCandidate, type GitHubRunnerScope, type GitLabCandidate } from '../../local/ci/assign';
import { StrayRunnerModes } from '../../local/ci/server-basics';

const org: GitHubRunnerScope = { kind: 'org', organization: 'Acme' };
const repo: GitHubRunnerScope = { kind: 'repo', repository: 'acme/app' };
const gh = (id: number, labels: string[], over: Partial<GitHubCandidate> = {}): GitHubCandidate => ({ id, repository: 'acme/app', labels, status: 'queued', ...over });

describe('githubJobFor: the oldest queued job in scope whose labels the runner all has', () => {
  it.each<[string, string[], GitHubRunnerScope, GitHubCandidate[], number | undefined]>([
    ['exact labels', ['self-hosted', 'linux'], org, [gh(1, ['self-hosted', 'linux'])], 1],
    ['the runner may have more labels than the job', ['self-hosted', 'linux', 'x64'], org, [gh(1, ['self-hosted', 'linux'])], 1],
    ['a label the runner lacks', ['self-hosted', 'linux'], org, [gh(1, ['self-hosted', 'linux', 'gpu'])], undefined],
    ['labels compare case-insensitively', ['self-hosted', 'Linux'], org, [gh(1, ['Self-Hosted', 'LINUX'])], 1],
    ['self-hosted is implied even when the registration does not name it', ['linux'], org, [gh(1, ['self-hosted', 'linux'])], 1],
    ['a job with only self-hosted runs on any runner', ['gpu'], org, [gh(1, ['self-hosted'])], 1],
    ['the oldest match wins, whatever the order held', ['self-hosted', 'linux'], org, [gh(7, ['linux']), gh(3, ['linux']), gh(5, ['linux'])], 3],
    ['an older job the runner cannot take is passed over', ['self-hosted', 'linux'], org, [gh(1, ['gpu']), gh(2, ['linux'])], 2],
    ['jobs not queued are not offered', ['linux'], org, [gh(1, ['linux'], { status: 'in_progress' }), gh(2, ['linux'], { status: 'completed' }), gh(3, ['linux'])], 3],
    ['an organisation runner takes any repository of its organisation (case-insensitive)', ['linux'], org, [gh(1, ['linux'], { repository: 'ACME/other' })], 1],
    ['an organisation runner never takes another organisation’s job', ['linux'], org, [gh(1, ['linux'], { repository: 'acme-fork/app' })], undefined],
    ['a repository runner takes only its repository’s jobs', ['linux'], repo, [gh(1, ['linux'], { repository: 'acme/other' }), gh(2, ['linux'], { repository: 'Acme/App' })], 2],
    ['no jobs', ['linux'], org, [], undefined],
  ])('%s', (_name, labels, scope, jobs, expected) => {
    expect(githubJobFor({ labels, scope }, jobs)?.id).toBe(expected);
  });
});

const gl = (id: number, tags: string[], over: Partial<GitLabCandidate> = {}): GitLabCandidate => ({ id, projectId: 380, tags, status: 'pending', ...over });

describe('gitlabJobFor: the oldest pending job the runner may take', () => {
  it.each<[string, { tagList: string[]; runUntagged: boolean; projectId?: number }, GitLabCandidate[], number | undefined]>([
    ['tags all among the runner’s', { tagList: ['docker', 'linux'], runUntagged: false }, [gl(1, ['docker'])], 1],
    ['a tag the runner lacks', { tagList: ['docker'], runUntagged: true }, [gl(1, ['docker', 'gpu'])], undefined],
    ['an untagged job needs a runner that runs untagged jobs', { tagList: ['docker'], runUntagged: false }, [gl(1, [])], undefined],
    ['an untagged job on a run-untagged runner', { tagList: ['docker'], runUntagged: true }, [gl(1, [])], 1],
    ['an untagged runner takes untagged jobs only', { tagList: [], runUntagged: true }, [gl(1, ['docker']), gl(2, [])], 2],
    ['the oldest match wins, whatever the order held', { tagList: ['docker'], runUntagged: false }, [gl(9, ['docker']), gl(4, ['docker'])], 4],
    ['an older job the runner cannot take is passed over', { tagList: ['docker'], runUntagged: false }, [gl(1, []), gl(2, ['gpu']), gl(3, ['docker'])], 3],
    ['jobs not pending are not offered', { tagList: ['docker'], runUntagged: false }, [gl(1, ['docker'], { status: 'running' }), gl(2, ['docker'], { status: 'success' })], undefined],
    ['a project runner takes only its project’s jobs', { tagList: ['docker'], runUntagged: false, projectId: 999 }, [gl(1, ['docker']), gl(2, ['docker'], { projectId: 999 })], 2],
    ['a group or instance runner takes any project’s jobs', { tagList: ['docker'], runUntagged: false }, [gl(1, ['docker'], { projectId: 7 })], 1],
    ['no jobs', { tagList: ['docker'], runUntagged: true }, [], undefined],
  ])('%s', (_name, runner, jobs, expected) => {
    expect(gitlabJobFor(runner, jobs)?.id).toBe(expected);
  });
});

describe('StrayRunnerModes (server-basics.ts)', () => {
  const waiting = [
    { id: 1, projectId: 5, tags: ['docker'], status: 'pending' },
    { id: 2, projectId: 5, tags: ['docker'], status: 'pending' },
    { id: 3, projectId: 5, tags: ['gpu'], status: 'pending' },
  ];
  const runner = { tagList: ['docker'], runUntagged: false };
  const choose = (jobs: Iterable<(typeof waiting)[number]>) => gitlabJobFor(runner, jobs);

  it('without modes, or for a runner not in them, the service chooses: the oldest it may take', () => {
    expect(new StrayRunnerModes(undefined).jobFor('r', waiting, choose)?.id).toBe(1);
    const modes = new StrayRunnerModes({ ownJob: () => 1, takesAnotherJob: (name) => name === 'stray' });
    expect(modes.jobFor('r', waiting, choose)?.id).toBe(1);
    expect(modes.dies('r')).toBe(false);
  });

  it('takesAnotherJob: another job of its labels than its own while one waits, else its own; an unknown own job changes nothing', () => {
    const modes = new StrayRunnerModes({ ownJob: (name) => (name === 'unknown' ? undefined : 1), takesAnotherJob: () => true });
    expect(modes.jobFor('stray', waiting, choose)?.id).toBe(2);
    expect(modes.jobFor('stray', waiting.filter((j) => j.id !== 2), choose)?.id).toBe(1);
    expect(modes.jobFor('unknown', waiting, choose)?.id).toBe(1);
  });

  it('diesBeforeJob: once dead, dead for every later request', () => {
    let dying = true;
    const modes = new StrayRunnerModes({ ownJob: () => undefined, diesBeforeJob: () => dying });
    expect(modes.dies('r')).toBe(true);
    dying = false;
    expect(modes.dies('r')).toBe(true);
    expect(modes.dies('other')).toBe(false);
  });
});
