/**
 * The calibration loop in a process of its own (`node --import tsx bench/calibrate-process.ts`),
 * for a benchmark to time it under a CPU limit: prints one JSON line, a `Calibration`.
 */
import { calibrate } from './calibrate';

const { wallMs, cpuMs } = calibrate();
process.stdout.write(`${JSON.stringify({ wallMs, cpuMs })}\n`);
