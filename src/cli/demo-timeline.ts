import { performance } from 'node:perf_hooks'

/** The rows of a round's timeline: its two workers, the lease store, the database. */
export const lanes = ['worker 1', 'worker 2', 'lock service', 'database'] as const
export type Lane = (typeof lanes)[number]
export type WorkerLane = 'worker 1' | 'worker 2'

/** What became of a write: committed, refused with a SQLSTATE, or committed over a newer one. */
export type WriteOutcome = 'committed' | 'corrupted' | (string & {})

export interface WriteEvent {
  kind: 'write'
  atMs: number
  lane: WorkerLane
  value: string
  token: string | null
  outcome: WriteOutcome
  text: string
}

/** One thing that happened in a round, `atMs` after it started. */
export type TimelineEvent =
  | { kind: 'grant'; atMs: number; lane: WorkerLane; token: string | null; text: string }
  /** A lease's TTL ran out: it was not renewed (its holder was frozen). */
  | { kind: 'expiry'; atMs: number; lane: 'lock service'; holder: WorkerLane; text: string }
  | { kind: 'pause'; atMs: number; endMs: number; lane: WorkerLane; text: string }
  | WriteEvent
  /** A step of the lock service itself (the Redis failover). */
  | { kind: 'service'; atMs: number; lane: 'lock service'; text: string }
  | { kind: 'final'; atMs: number; lane: 'database'; value: string; text: string }

/** An event before it is given its time. */
type WithoutTime<E> = E extends TimelineEvent ? Omit<E, 'atMs'> : never

/**
 * The events of one round as they happen: each is printed as a line with its time (`say`),
 * except those only known afterwards, and kept for the JSON and the HTML page.
 */
export class Timeline {
  readonly events: TimelineEvent[] = []
  private readonly startedAt = performance.now()

  constructor(private readonly say: (line: string) => void) {}

  /** Milliseconds since the round started. */
  now(): number {
    return Math.round(performance.now() - this.startedAt)
  }

  /** Prints a line that is no event of its own (it is told again when the event is complete). */
  tell(text: string): void {
    this.say(`  ${(this.now() / 1000).toFixed(2)}s  ${text}`)
  }

  /** Records an event that happened now, and prints it. */
  add(event: WithoutTime<TimelineEvent>): TimelineEvent {
    const recorded = { ...event, atMs: this.now() } as TimelineEvent
    this.tell(recorded.text)
    this.events.push(recorded)
    return recorded
  }

  /** Records an event known only afterwards (a pause, once over; an expiry, once past). */
  addPast(event: TimelineEvent): void {
    this.events.push(event)
  }
}
