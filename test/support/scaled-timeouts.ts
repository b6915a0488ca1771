import { vi } from 'vitest';
import { scaled } from './slowdown';

// Vitest's own safety bounds, per test file from the slowdown measured as it starts: the
// config's figure is the suite's start, and the load rises while the suite runs. A file's
// scaled bounds (moto's start, polling helpers) then stay inside the caps that end them.
vi.setConfig({ testTimeout: scaled(30_000), hookTimeout: scaled(60_000) });
