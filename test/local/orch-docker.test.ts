import { describe, expect, it } from 'vitest';
import { LOCAL_DOCKER_IMAGE } from '../../local/docker-daemon';
import { buildDockerProof, DOCKER_JOBS, dockerInstallFigure, type DockerDaemonState, type DockerJobReport } from '../../local/docker-run';

/** The docker run's proof (local/docker-run.ts), rule by rule. */
const jobs = [
  { provider: 'github', ciJobId: '1' },
  { provider: 'gitlab', ciJobId: '2' },
];
const good = (job: string): DockerJobReport => ({
  job,
  instance: 'i-0123456789abcdef0',
  image: LOCAL_DOCKER_IMAGE,
  services: [LOCAL_DOCKER_IMAGE],
  status: 0,
  output: 'image=cwr-busybox-local service=service-ok',
  left: [],
});
const clean: DockerDaemonState = { containers: [], networks: [], volumes: [], imageKept: true };
const install = { installs: 4, medianSeconds: 0.3, maxSeconds: 0.4 };
const reports = { 'github-1': good('github-1'), 'gitlab-2': good('gitlab-2') };

describe('the docker run proof', () => {
  it('passes when every job ran in its containers with its service and the daemon is clean with its image', () => {
    expect(buildDockerProof(jobs, reports, clean, install)).toMatchObject({ passed: true, failures: [], jobs: 2, ranInContainers: 2 });
  });
  it.each<[string, Record<string, DockerJobReport>, DockerDaemonState, RegExp]>([
    ['a job without a report', { 'github-1': good('github-1') }, clean, /gitlab-2 wrote no container report/],
    ['a failed script', { ...reports, 'github-1': { ...good('github-1'), status: 1, output: 'image=cwr-busybox-local service=' } }, clean, /github-1 on i-0123456789abcdef0: status 1/],
    ['another image', { ...reports, 'gitlab-2': { ...good('gitlab-2'), image: 'alpine:3' } }, clean, /gitlab-2 .*image alpine:3/],
    ['no service container', { ...reports, 'github-1': { ...good('github-1'), services: [] } }, clean, /github-1 ran without its service container/],
    ["a job's own leftovers", { ...reports, 'gitlab-2': { ...good('gitlab-2'), left: ['abc123'] } }, clean, /gitlab-2 left abc123 on the daemon/],
    ['a container on the daemon', reports, { ...clean, containers: ['c1'] }, /still holds 1 containers/],
    ['a network on the daemon', reports, { ...clean, networks: ['n1'] }, /still holds 1 networks/],
    ['a volume on the daemon', reports, { ...clean, volumes: ['v1'] }, /still holds 1 volumes/],
    ['the image gone', reports, { ...clean, imageKept: false }, /images are the cache and must stay/],
  ])('fails on %s', (_what, r, daemon, failure) => {
    const proof = buildDockerProof(jobs, r, daemon, install);
    expect(proof.passed).toBe(false);
    expect(proof.failures.join('\n')).toMatch(failure);
  });
  it('fails when no machine installed Docker, and when no job was sent', () => {
    expect(buildDockerProof(jobs, reports, clean, { installs: 0, medianSeconds: 0, maxSeconds: 0 }).failures).toContain('no machine installed Docker');
    expect(buildDockerProof([], {}, clean, install)).toMatchObject({ passed: false, failures: ['no job was sent'] });
  });
  it('sends container jobs with a service for both providers, in the run image', () => {
    for (const j of Object.values(DOCKER_JOBS)) {
      expect(j.containers?.image).toBe(LOCAL_DOCKER_IMAGE);
      expect(j.containers?.services?.length).toBe(1);
      // The job reaches its service by its alias, over the job's network.
      expect(j.script).toContain(` ${j.containers!.services![0]!.alias} 8080`);
    }
  });
});

describe("the Docker install step's figure from the boot logs", () => {
  it('takes the seconds from "installing Docker" to "Docker is ready" on each machine', () => {
    const log = (a: string, b: string): string =>
      [`${a} start-runner[10]: installing Docker (docker)`, '2026-12-06T10:00:00.500Z start-runner[10]: something else', `${b} start-runner[10]: Docker is ready`].join('\n');
    const figure = dockerInstallFigure([log('2026-12-06T10:00:00.000Z', '2026-12-06T10:00:00.250Z'), log('2026-12-06T10:00:01.000Z', '2026-12-06T10:00:02.000Z'), 'no docker here']);
    expect(figure).toEqual({ installs: 2, medianSeconds: 1, maxSeconds: 1 });
    expect(dockerInstallFigure(['2026-12-06T10:00:00.000Z start-runner[1]: Docker is ready'])).toEqual({ installs: 0, medianSeconds: 0, maxSeconds: 0 });
  });
});
