/**
 * The npm scripts that can run where the package is installed, not built: npm runs
 * preinstall, install and postinstall for every dependency it installs, and the prepare
 * family for git and directory dependencies and for `npm install` inside the package.
 * (npm docs, "scripts": "Life Cycle Operation Order").
 */
export const INSTALL_TIME_SCRIPTS = ['preinstall', 'install', 'postinstall', 'prepublish', 'preprepare', 'prepare', 'postprepare'] as const;

/** Commands an installed package can count on: Node.js and npm themselves, and shell builtins. */
const AVAILABLE_COMMANDS = new Set(['node', 'npm', 'exit', 'true', 'echo', 'cd']);

const PATH_TOKEN = /(?:^|[\s'"=])((?:\.{1,2}\/)?[\w@.-]+(?:\/[\w@.-]+)*\.(?:mjs|cjs|js|ts|mts|sh|json))(?=$|[\s'"])/g;

/**
 * What the install-time scripts of a package need that it does not carry: files it does not
 * ship, scripts it does not define, and commands that only its devDependencies provide.
 * `exists` answers for a path relative to the package root. Empty when nothing is missing.
 */
export function installTimeProblems(scripts: Readonly<Record<string, string>>, exists: (path: string) => boolean): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  const check = (name: string, via: string) => {
    if (seen.has(name)) return;
    seen.add(name);
    const command = scripts[name];
    if (command === undefined) return;
    for (const segment of command.split(/&&|\|\||;|\|/).map((s) => s.trim()).filter(Boolean)) {
      const words = segment.split(/\s+/);
      const [first = '', second, third] = words;
      if (!AVAILABLE_COMMANDS.has(first)) {
        problems.push(`${via}: runs "${first}", which an installed package does not have (a devDependency's binary?)`);
        continue;
      }
      if (first === 'npm' && (second === 'run' || second === 'run-script') && third) {
        if (scripts[third] === undefined) problems.push(`${via}: runs "npm run ${third}", which the package does not define`);
        else check(third, `${via} -> ${third}`);
      }
      for (const match of segment.matchAll(PATH_TOKEN)) {
        const path = match[1]!.replace(/^\.\//, '');
        if (!exists(path)) problems.push(`${via}: needs ${path}, which the package does not ship`);
      }
    }
  };
  for (const name of INSTALL_TIME_SCRIPTS) check(name, name);
  return problems;
}
