import { createHash } from 'node:crypto';
import { DEFAULT_RUNNER_PACKAGES, Provider } from '../../lambdas/shared/contract';
import { startLoopback, type Loopback, type SeenRequest } from './loopback';

// The runner publishers' release data as the pin check reads it, served from loopback: GitHub's
// release by tag (REST) and GitLab's release.sha256.

export const GH = DEFAULT_RUNNER_PACKAGES[Provider.GITHUB];
export const GL = DEFAULT_RUNNER_PACKAGES[Provider.GITLAB];
export const sha = (text: string): string => createHash('sha256').update(text).digest('hex');
export const OTHER = sha('a file nobody pinned');

/** A GitHub release body as actions/runner's releaseNote.md template lays it out, other platforms around. */
export function githubBody(version: string, linuxX64: string | undefined, linuxArm64: string): string {
  const block = (platform: string, sum: string, file: string) => `- ${file} <!-- BEGIN SHA ${platform} -->${sum}<!-- END SHA ${platform} -->`;
  return [
    '## SHA-256 Checksums',
    block('win-x64', OTHER, `actions-runner-win-x64-${version}.zip`),
    ...(linuxX64 ? [block('linux-x64', linuxX64, `actions-runner-linux-x64-${version}.tar.gz`)] : []),
    block('linux-arm64', linuxArm64, `actions-runner-linux-arm64-${version}.tar.gz`),
    block('linux-arm', sha('linux-arm'), `actions-runner-linux-arm-${version}.tar.gz`),
  ].join('\n');
}

export function gitlabSums(amd64: string, arm64: string | undefined): string {
  return [`${OTHER}  binaries/gitlab-runner-linux-386`, `${amd64}  binaries/gitlab-runner-linux-amd64`, ...(arm64 ? [`${arm64}  binaries/gitlab-runner-linux-arm64`] : []), `${OTHER}  deb/gitlab-runner_amd64.deb`, ''].join('\n');
}

export interface Published {
  github: Record<string, { body: string }>;
  gitlab: Record<string, string>;
}

/** One loopback server speaking both formats: GitHub's releases REST path and GitLab's release.sha256. */
export async function publisher(published: Published): Promise<Loopback> {
  return startLoopback((req: SeenRequest) => {
    const gh = /^\/repos\/actions\/runner\/releases\/tags\/v(.+)$/.exec(req.path);
    if (gh && published.github[gh[1]!]) return { status: 200, body: { tag_name: `v${gh[1]}`, body: published.github[gh[1]!]!.body } };
    const gl = /^\/v(.+)\/release\.sha256$/.exec(req.path);
    if (gl && published.gitlab[gl[1]!] !== undefined) return { status: 200, headers: { 'content-type': 'text/plain' }, body: published.gitlab[gl[1]!] };
    return { status: 404, body: { message: 'Not Found' } };
  });
}

/** Both publishers agreeing with the default pins. */
export const matching = (): Published => ({
  github: { [GH.version]: { body: githubBody(GH.version, GH.x64.sha256, GH.arm64.sha256) } },
  gitlab: { [GL.version]: gitlabSums(GL.x64.sha256, GL.arm64.sha256) },
});
