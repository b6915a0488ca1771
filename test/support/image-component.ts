import type { Template } from 'aws-cdk-lib/assertions';
import { INSTALL_STEP_NAME } from '../../lib/runner-image';

interface ComponentDocument {
  readonly name: string;
  readonly schemaVersion: number;
  readonly phases: { name: string; steps: { name: string; action: string; onFailure?: string; inputs: { commands: string[] } & Record<string, unknown> }[] }[];
}

/** Every component of the template with a plain-string JSON document (the ones this library writes), by logical id, parsed. */
export function componentDocuments(template: Template): Record<string, ComponentDocument> {
  const out: Record<string, ComponentDocument> = {};
  for (const [id, c] of Object.entries(template.findResources('AWS::ImageBuilder::Component'))) {
    const data: unknown = c.Properties.Data;
    if (typeof data === 'string' && data.startsWith('{')) out[id] = JSON.parse(data) as ComponentDocument;
  }
  return out;
}

/** The synthesized install component's document (its `Data`), parsed; the template must hold one install component. */
export function componentDocument(template: Template): ComponentDocument {
  const installs = Object.values(componentDocuments(template)).filter((d) => d.phases.some((p) => p.steps.some((s) => s.name === INSTALL_STEP_NAME)));
  if (installs.length !== 1) throw new Error(`expected one Image Builder install component, found ${installs.length}`);
  return installs[0]!;
}

/** The install step's commands as the one bash script ExecuteBash runs. */
export function componentShellStep(template: Template): string {
  const steps = componentDocument(template).phases.flatMap((p) => p.steps.filter((s) => s.name === INSTALL_STEP_NAME).map((s) => ({ phase: p.name, step: s })));
  if (steps.length !== 1 || steps[0]!.phase !== 'build' || steps[0]!.step.action !== 'ExecuteBash') {
    throw new Error(`expected one ExecuteBash step ${INSTALL_STEP_NAME} in the build phase`);
  }
  return steps[0]!.step.inputs.commands.join('\n');
}
