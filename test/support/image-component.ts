import type { Template } from 'aws-cdk-lib/assertions';
import { INSTALL_STEP_NAME } from '../../lib/runner-image';

interface ComponentDocument {
  readonly phases: { name: string; steps: { name: string; action: string; inputs: { commands: string[] } }[] }[];
}

/** The synthesized install component's document (its `Data`), parsed; the template must hold one component. */
export function componentDocument(template: Template): ComponentDocument {
  const components = Object.values(template.findResources('AWS::ImageBuilder::Component'));
  if (components.length !== 1) throw new Error(`expected one Image Builder component, found ${components.length}`);
  const data: unknown = components[0]!.Properties.Data;
  if (typeof data !== 'string') throw new Error('the component document is not a plain string');
  return JSON.parse(data) as ComponentDocument;
}

/** The install step's commands as the one bash script ExecuteBash runs. */
export function componentShellStep(template: Template): string {
  const steps = componentDocument(template).phases.flatMap((p) => p.steps.filter((s) => s.name === INSTALL_STEP_NAME).map((s) => ({ phase: p.name, step: s })));
  if (steps.length !== 1 || steps[0]!.phase !== 'build' || steps[0]!.step.action !== 'ExecuteBash') {
    throw new Error(`expected one ExecuteBash step ${INSTALL_STEP_NAME} in the build phase`);
  }
  return steps[0]!.step.inputs.commands.join('\n');
}
