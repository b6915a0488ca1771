/**
 * Generates docs/configuration.md from the props interfaces' JSDoc, so the page cannot drift
 * from the code: `npm run docs` writes it, and a test fails when it is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

const root = join(__dirname, '..');
const SOURCES = ['lib/warm-runners.ts', 'lib/props.ts', 'lambdas/shared/contract/runner-packages.ts', 'lib/runner-image.ts'];
const INTERFACES = ['WarmRunnersProps', 'GitHubConnectionProps', 'GitLabConnectionProps', 'RunnerPoolProps', 'WarmPoolProps', 'PoolReuseProps', 'PoolDockerProps', 'RunnerPackage', 'RunnerPackageDownload', 'RunnerImageProps'];
/** The enums the props take, with the file that declares each. */
const ENUMS: readonly (readonly [string, string])[] = [
  ['Provider', 'lambdas/shared/contract/boot.ts'],
  ['LabelMatch', 'lambdas/shared/contract/fleet-config.ts'],
  ['GitLabRunnerType', 'lambdas/shared/contract/fleet-config.ts'],
  ['ReuseScope', 'lambdas/shared/contract/reuse.ts'],
];

interface Member {
  name: string;
  type: string;
  optional: boolean;
  doc: string;
  defaultValue: string | undefined;
}

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, readFileSync(join(root, file), 'utf8'), ts.ScriptTarget.Latest, true);
}

function docOf(node: ts.Node): { comment: string; defaultValue: string | undefined } {
  const docs = ts.getJSDocCommentsAndTags(node).filter(ts.isJSDoc);
  const comment = docs.map((d) => ts.getTextOfJSDocComment(d.comment) ?? '').join(' ').replace(/\s+/g, ' ').trim();
  const tag = docs.flatMap((d) => d.tags ?? []).find((t) => t.tagName.text === 'default');
  const defaultValue = tag ? (ts.getTextOfJSDocComment(tag.comment) ?? '').replace(/\s+/g, ' ').trim() : undefined;
  return { comment, defaultValue };
}

function membersOf(file: string): Map<string, { doc: string; members: Member[] }> {
  const source = parse(file);
  const found = new Map<string, { doc: string; members: Member[] }>();
  source.forEachChild((node) => {
    if (!ts.isInterfaceDeclaration(node) || !INTERFACES.includes(node.name.text)) return;
    const members: Member[] = [];
    for (const m of node.members) {
      if (!ts.isPropertySignature(m) || !m.type) continue;
      const { comment, defaultValue } = docOf(m);
      members.push({ name: m.name.getText(source), type: m.type.getText(source), optional: !!m.questionToken, doc: comment, defaultValue });
    }
    found.set(node.name.text, { doc: docOf(node).comment, members });
  });
  return found;
}

export function renderConfigurationDoc(): string {
  const all = new Map<string, { doc: string; members: Member[] }>();
  for (const file of SOURCES) for (const [name, value] of membersOf(file)) all.set(name, value);
  const lines = [
    '# Configuration',
    '',
    '<!-- Generated from the props JSDoc by scripts/docs-configuration.ts (`npm run docs`); a test fails when it is stale. -->',
    '',
    'Every prop of `WarmRunners` and of the structures it takes. Durations are `aws-cdk-lib` `Duration`s, sizes `Size`s.',
    '',
  ];
  for (const name of INTERFACES) {
    const entry = all.get(name);
    if (!entry) throw new Error(`interface ${name} not found in ${SOURCES.join(', ')}`);
    lines.push(`## ${name}`, '');
    if (entry.doc) lines.push(entry.doc, '');
    lines.push('| Prop | Type | Required | Default | Description |', '| --- | --- | --- | --- | --- |');
    for (const m of entry.members) {
      if (!m.doc) throw new Error(`${name}.${m.name} has no JSDoc: document it`);
      if (m.optional && m.defaultValue === undefined) throw new Error(`${name}.${m.name} is optional but has no @default`);
      const cell = (s: string) => s.replace(/\|/g, '\\|');
      lines.push(`| \`${m.name}\` | \`${cell(m.type)}\` | ${m.optional ? 'no' : 'yes'} | ${cell(m.defaultValue ?? '')} | ${cell(m.doc)} |`);
    }
    lines.push('');
  }
  for (const [name, file] of ENUMS) lines.push(...enumSection(name, file));
  return lines.join('\n');
}

/**
 * An enum's members with the value each one stands for: the string the FleetConfig JSON
 * carries. Other CDK languages spell the members the same way (`Provider.GITHUB`).
 */
function enumSection(name: string, file: string): string[] {
  const declaration = parse(file).statements.find((s): s is ts.EnumDeclaration => ts.isEnumDeclaration(s) && s.name.text === name);
  if (!declaration) throw new Error(`enum ${name} not found in ${file}`);
  const lines = [`## ${name}`, ''];
  const doc = docOf(declaration).comment;
  if (doc) lines.push(doc, '');
  lines.push('| Member | Value | Description |', '| --- | --- | --- |');
  for (const member of declaration.members) {
    const memberName = member.name.getText();
    if (!member.initializer || !ts.isStringLiteral(member.initializer)) throw new Error(`${name}.${memberName} must have a string value (the JSON carries it)`);
    const memberDoc = docOf(member).comment;
    if (!memberDoc) throw new Error(`${name}.${memberName} has no JSDoc: document it`);
    lines.push(`| \`${name}.${memberName}\` | \`'${member.initializer.text}'\` | ${memberDoc.replace(/\|/g, '\\|')} |`);
  }
  lines.push('');
  return lines;
}

if (require.main === module) {
  writeFileSync(join(root, 'docs', 'configuration.md'), renderConfigurationDoc());
  console.log('wrote docs/configuration.md');
}
