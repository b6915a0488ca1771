/**
 * Synthesizes a RunnerImage for the boot sandbox and writes the shell step of its install
 * component, taken from the synthesized component document (not from the renderer), to
 * DIR/image-component-github.sh: what Image Builder's ExecuteBash step would run, with the
 * loopback release server's packages and the sandbox's runner user and directory. The image's
 * own steps (a shell step, Docker: the install script with Docker on) go to DIR/image-step-github-<n>.sh, in recipe order.
 *
 *   node --import tsx test/templates/render-image-component.ts --root DIR --runner-user USER \
 *     --release URL --release-dir DIR
 *
 * GitHub only: a GitLab image installs to /usr/bin/gitlab-runner, a path the sandbox cannot
 * relocate (the pools' props do not move it either); its document is checked by the synth tests.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { Provider } from '../../lambdas/shared/contract';
import { RunnerImage } from '../../lib/runner-image';
import { RunnerImageStep } from '../../lib/runner-image-steps';
import { componentDocuments, componentShellStep } from '../support/image-component';
import { sandboxRunnerPackage } from './sandbox-release';

const { values } = parseArgs({
  options: { root: { type: 'string' }, 'runner-user': { type: 'string' }, release: { type: 'string' }, 'release-dir': { type: 'string' } },
  strict: true,
});
const { root, release } = values;
const runnerUser = values['runner-user'];
if (!root || !runnerUser || !release) {
  console.error('usage: render-image-component.ts --root DIR --runner-user USER --release URL [--release-dir DIR]');
  process.exit(2);
}

const stack = new Stack(new App(), 'Image', { env: { account: '123456789012', region: 'eu-west-1' } });
const image = new RunnerImage(stack, 'Github', {
  provider: Provider.GITHUB,
  runnerUser,
  runnerDirectory: join(root, 'runner', 'github'),
  runnerPackage: sandboxRunnerPackage(Provider.GITHUB, release, values['release-dir']),
  // The team's steps, after the install step: one that needs the runner user it created, then Docker.
  steps: [
    RunnerImageStep.shell('probe', [`getent passwd ${runnerUser} | cut -d: -f1 >>${join(root, 'calls', 'image-steps')}`, `test -x ${join(root, 'runner', 'github', 'run.sh')}`]),
    RunnerImageStep.docker(),
  ],
});
const template = Template.fromStack(stack);
const write = (name: string, script: string): void => {
  const file = join(root, name);
  writeFileSync(file, script.startsWith('#!') ? script : `#!/bin/bash\n${script}\n`);
  chmodSync(file, 0o755);
};
write('image-component-github.sh', componentShellStep(template));
// Each step's ExecuteBash script, from the synthesized documents, in recipe order.
const documents = componentDocuments(template);
image.stepComponents.forEach((component, i) => {
  const doc = documents[stack.getLogicalId(component)];
  if (!doc) throw new Error(`no document for step ${i + 1}`);
  write(`image-step-github-${i + 1}.sh`, doc.phases[0]!.steps[0]!.inputs.commands.join('\n'));
});
