// PLACEHOLDER: replaced by the boot branch's renderer at merge
import type { Provider } from '../lambdas/shared/contract';
export interface UserDataOptions { prefix: string; provider: Provider; runnerUser?: string; runnerDirectory?: string; prepareCommands?: readonly string[] }
export function renderUserData(options: UserDataOptions): string {
  return `#!/bin/bash\n# ${options.prefix} ${options.provider}\n${(options.prepareCommands ?? []).join('\n')}\n`;
}
