/**
 * The npm scripts that can run where the package is installed, not built: npm runs
 * preinstall, install and postinstall for every dependency it installs, and the prepare
 * family for git and directory dependencies and for `npm install` inside the package.
 * (npm docs, "scripts": "Life Cycle Operation Order").
 */
export const INSTALL_TIME_SCRIPTS = ['preinstall', 'install', 'postinstall', 'prepublish', 'preprepare', 'prepare', 'postprepare'] as const;
