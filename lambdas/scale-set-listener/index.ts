// PLACEHOLDER on branch i26-construct only, so the construct's bundle and synth tests have an
// entry point: part L's listener (lambdas/scale-set-listener/index.ts, export `handler`)
// replaces this file at merge. It does nothing but say so.
export const handler = async (): Promise<never> => {
  throw new Error('scale-set listener placeholder: the listener of issue 26 part L is not merged into this build');
};
