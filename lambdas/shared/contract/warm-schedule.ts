/**
 * A pool's warm size can follow a schedule: a list of windows, each with the size that
 * applies inside it; outside every window the pool's base size applies. A window is
 * written "<days> <HH:MM>-<HH:MM>" in UTC, days as MON..SUN, a range "MON-FRI", a list
 * "MON,WED,FRI" or "*": for example "MON-FRI 07:00-19:00". An end before the start
 * wraps past midnight ("FRI 22:00-02:00" covers Friday night into Saturday).
 */
export interface WarmScheduleEntry {
  readonly window: string;
  readonly size: number;
}

interface ParsedWindow {
  readonly days: ReadonlySet<number>; // 0 = Sunday, as Date.getUTCDay
  readonly start: number; // minutes after midnight
  readonly end: number;
}

const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

function parseTime(text: string, window: string): number {
  const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(text);
  if (!match) throw new Error(`warm schedule window "${window}": "${text}" is not a time HH:MM (00:00-23:59, UTC)`);
  return Number(match[1]) * 60 + Number(match[2]);
}

function parseDay(text: string, window: string): number {
  const day = DAYS.indexOf(text.toUpperCase());
  if (day < 0) throw new Error(`warm schedule window "${window}": "${text}" is not a day (use ${DAYS.join(', ')})`);
  return day;
}

export function parseWarmWindow(window: string): ParsedWindow {
  const parts = window.trim().split(/\s+/);
  if (parts.length !== 2) {
    throw new Error(`warm schedule window "${window}" must be "<days> <HH:MM>-<HH:MM>", for example "MON-FRI 07:00-19:00"`);
  }
  const [dayText, timeText] = parts as [string, string];
  const days = new Set<number>();
  if (dayText === '*') {
    for (let d = 0; d < 7; d++) days.add(d);
  } else {
    for (const item of dayText.split(',')) {
      const range = item.split('-');
      if (range.length === 1) days.add(parseDay(item, window));
      else if (range.length === 2) {
        const from = parseDay(range[0]!, window);
        const to = parseDay(range[1]!, window);
        for (let d = from; ; d = (d + 1) % 7) {
          days.add(d);
          if (d === to) break;
        }
      } else throw new Error(`warm schedule window "${window}": "${item}" is not a day or a day range`);
    }
  }
  const times = timeText.split('-');
  if (times.length !== 2) throw new Error(`warm schedule window "${window}": "${timeText}" must be "<HH:MM>-<HH:MM>"`);
  const start = parseTime(times[0]!, window);
  const end = parseTime(times[1]!, window);
  if (start === end) throw new Error(`warm schedule window "${window}" is empty: its start equals its end`);
  return { days, start, end };
}

function inWindow(w: ParsedWindow, now: Date): boolean {
  const minute = now.getUTCHours() * 60 + now.getUTCMinutes();
  const day = now.getUTCDay();
  if (w.start < w.end) return w.days.has(day) && minute >= w.start && minute < w.end;
  // Wraps past midnight: the part after midnight belongs to the previous day's window.
  if (minute >= w.start) return w.days.has(day);
  return minute < w.end && w.days.has((day + 6) % 7);
}

/** The warm size in force at `now`: the first matching window's, else `baseSize`. */
export function warmSizeAt(baseSize: number, schedule: readonly WarmScheduleEntry[], now: Date): number {
  for (const entry of schedule) {
    if (inWindow(parseWarmWindow(entry.window), now)) return entry.size;
  }
  return baseSize;
}

/** A Sunday, 00:00 UTC: minute 0 of the week `weekMinutes` counts from. */
const WEEK_START = Date.UTC(2023, 0, 1);
const WEEK_MINUTES = 7 * 24 * 60;

/** Which minutes of the week (0 = Sunday 00:00 UTC) a window covers, by the rule `warmSizeAt` applies. */
function weekMinutes(window: string): boolean[] {
  const parsed = parseWarmWindow(window);
  return Array.from({ length: WEEK_MINUTES }, (_, m) => inWindow(parsed, new Date(WEEK_START + m * 60_000)));
}

/**
 * Windows of one schedule that overlap; the first matching window wins (`warmSizeAt`):
 * - `shadowed`: every minute of window `later` lies in earlier windows (`earlier`), so its
 *   size never applies;
 * - `overlap`: windows `earlier` and `later` share minutes and give different sizes; the
 *   earlier one's applies there.
 */
export interface ScheduleOverlap {
  readonly kind: 'shadowed' | 'overlap';
  readonly later: number;
  readonly earlier: readonly number[];
}

export function scheduleOverlaps(schedule: readonly WarmScheduleEntry[]): ScheduleOverlap[] {
  const minutes = schedule.map((e) => weekMinutes(e.window));
  const out: ScheduleOverlap[] = [];
  minutes.forEach((mine, j) => {
    const overlapping = minutes.slice(0, j).flatMap((theirs, i) => (mine.some((on, m) => on && theirs[m]) ? [i] : []));
    if (overlapping.length === 0) return;
    if (mine.every((on, m) => !on || overlapping.some((i) => minutes[i]![m]))) {
      out.push({ kind: 'shadowed', later: j, earlier: overlapping });
      return;
    }
    // Window i decides only the shared minutes no window before it takes: compare the sizes there.
    const decides = (i: number) => mine.some((on, m) => on && minutes[i]![m] && !minutes.slice(0, i).some((earlier) => earlier[m]));
    for (const i of overlapping) if (schedule[i]!.size !== schedule[j]!.size && decides(i)) out.push({ kind: 'overlap', later: j, earlier: [i] });
  });
  return out;
}
