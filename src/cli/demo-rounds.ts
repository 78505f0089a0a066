import { fork, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { setTimeout as delay } from 'node:timers/promises'
import type { Config } from '../config/schema.js'
import { prepareDemoDatabase, unfencedUrl, withClient } from '../dev/demo-database.js'
import { startRedisFailover } from '../dev/redis-failover.js'
import type { DemoEvent, DemoTask, RoundName, WorkerStore } from './demo-worker.js'
import {
  Timeline,
  type TimelineEvent,
  type WorkerLane,
  type WriteEvent,
  type WriteOutcome,
} from './demo-timeline.js'

export interface RoundResult {
  name: RoundName
  finalValue: string
  corrupted: boolean
  /** SQLSTATE the stale write got, or null when it went through. */
  staleWriteCode: string | null
  /** The lease's TTL in this round. */
  ttlMs: number
  events: TimelineEvent[]
}

export interface DemoEnvironment {
  /** The lease store of the GC-pause rounds, and their lease TTL and pause. */
  store: WorkerStore
  timing: PauseTiming
  /** A database of the server to create and drop the demo database from. */
  adminUrl: string
  /** The demo database, straight to PostgreSQL. */
  databaseUrl: string
  /** The demo database through pgfence. */
  proxyUrl: string
  fencing: Config['fencing']
  /** Aborts on SIGINT or SIGTERM: the round stops waiting, its workers are killed. */
  interrupted: AbortSignal
}

export const pauseRounds = ['naive', 'lease', 'fenced', 'split-brain'] as const
/**
 * The lease's TTL and worker 1's pause in the GC-pause rounds: 1 s and 1.5 s, or 2 s and 3 s
 * with etcd, which counts TTLs in whole seconds with a minimum of its own (1.5 s by default).
 */
export function pauseTiming(store: string): PauseTiming {
  return store === 'etcd' ? { ttlMs: 2000, freezeMs: 3000 } : { ttlMs: 1000, freezeMs: 1500 }
}

export interface PauseTiming {
  ttlMs: number
  freezeMs: number
}
/** How long a worker that wrote may take to release its lease and exit. */
const workerExitMs = 5000
/** Long enough that neither holder's lease runs out while Sentinel fails over. */
const failoverTtlMs = 30_000
const firstValue = 'A'
const secondValue = 'B'

/** How each round takes its lease and where it writes. */
export const roundStory: Record<RoundName, { lock: string; path: string; expected: string }> = {
  naive: { lock: 'a lease used as a plain lock', path: 'PostgreSQL', expected: 'corrupted' },
  lease: { lock: 'LeaseManager, signal checked', path: 'PostgreSQL', expected: 'corrupted' },
  fenced: { lock: 'LeaseManager token', path: 'pgfence', expected: 'PF409, B stays' },
  'split-brain': {
    lock: 'LeaseManager, raiseFence',
    path: 'pgfence, resource fence',
    expected: 'PF409, B stays',
  },
  'redis-failover': {
    lock: 'LeaseManager on Redis + Sentinel',
    path: 'pgfence',
    expected: 'PF409, B stays',
  },
}

/** The resource that fences the billing run's tables in the split-brain round. */
export const billingResource = 'nightly-billing'

/** The nightly billing run of the split-brain round: two tables fenced by one resource. */
const billingTablesSql = `
CREATE TABLE IF NOT EXISTS payouts (invoice_id bigint PRIMARY KEY, paid_by text NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_entries (
  id bigserial PRIMARY KEY,
  invoice_id bigint NOT NULL,
  leader text NOT NULL
);
DELETE FROM ledger_entries;
INSERT INTO payouts (invoice_id, paid_by) VALUES (99, 'nobody')
ON CONFLICT (invoice_id) DO UPDATE SET paid_by = excluded.paid_by;
`

/** A forked worker whose reports arrive in order; `next` waits for the next one. */
class Worker {
  private readonly events: DemoEvent[] = []
  private waiting: (() => void) | undefined
  /** Why the IPC channel failed (a send to a worker that is gone). */
  private channelError: Error | undefined
  readonly exited: Promise<number | null>

  constructor(
    readonly process: ChildProcess,
    private readonly interrupted: AbortSignal,
  ) {
    process.on('message', (event: DemoEvent) => {
      this.events.push(event)
      this.waiting?.()
    })
    process.on('error', (err) => {
      this.channelError = err
      this.waiting?.()
    })
    this.exited = new Promise((resolve) => process.once('exit', (code) => resolve(code)))
    const wake = () => this.waiting?.()
    interrupted.addEventListener('abort', wake, { once: true })
    void this.exited.then(() => {
      interrupted.removeEventListener('abort', wake)
      wake()
    })
  }

  async next(): Promise<DemoEvent> {
    while (this.events.length === 0) {
      this.interrupted.throwIfAborted()
      if (this.channelError) throw this.channelError
      if (this.process.exitCode !== null || this.process.signalCode !== null) {
        throw new Error(`demo worker exited (${this.process.exitCode ?? this.process.signalCode})`)
      }
      await new Promise<void>((resolve) => (this.waiting = resolve))
    }
    const event = this.events.shift()!
    if (event.event === 'failed') throw new Error(`a demo worker failed: ${event.message}`)
    return event
  }

  /** The worker's next report, which must be `event`. */
  async expect<K extends DemoEvent['event']>(event: K): Promise<Extract<DemoEvent, { event: K }>> {
    const next = await this.next()
    if (next.event !== event) throw new Error(`a demo worker reported ${next.event}, not ${event}`)
    return next as Extract<DemoEvent, { event: K }>
  }

  /**
   * Gives the worker up to `ms` to release its lease and exit by itself (stop() kills it after);
   * throws if the demo is interrupted meanwhile.
   */
  async finish(ms: number): Promise<void> {
    const exited = new AbortController()
    const timeout = delay(ms, undefined, {
      signal: AbortSignal.any([exited.signal, this.interrupted]),
    })
    await Promise.race([this.exited, timeout.catch(() => {})])
    exited.abort() // no timer is left to keep the demo alive
    this.interrupted.throwIfAborted()
  }

  /** Kills the worker if it still runs (frozen or not), and waits for it to be gone. */
  async stop(): Promise<void> {
    if (this.process.exitCode === null && this.process.signalCode === null) {
      this.process.kill('SIGKILL')
    }
    await this.exited
  }
}

function startWorker(task: DemoTask, interrupted: AbortSignal): Worker {
  const script = new URL('./demo-worker.js', import.meta.url)
  return new Worker(
    fork(script, [JSON.stringify(task)], { stdio: ['pipe', 'inherit', 'inherit', 'ipc'] }),
    interrupted,
  )
}

/** The event after `about-to-write`: committed, or refused with a SQLSTATE. */
function outcomeOf(event: DemoEvent): { outcome: WriteOutcome; said: string } {
  if (event.event === 'wrote') return { outcome: 'committed', said: 'committed' }
  if (event.event === 'refused') {
    return {
      outcome: event.code ?? 'refused',
      said: `refused with ${event.code}: ${event.message}`,
    }
  }
  throw new Error(`a demo worker reported ${event.event}, not the outcome of its write`)
}

/**
 * Row 99 back to PENDING at token 100, invoice 99 unpaid with an empty ledger, and the token
 * source at 100 or above, so every round tells the same story and tokens never go back.
 */
async function resetInvoice(env: DemoEnvironment): Promise<void> {
  // Before the fence schema: its gates fence the billing tables from their creation on.
  await prepareDemoDatabase(env.adminUrl, env.databaseUrl, env.fencing, billingTablesSql)
  await withClient(env.databaseUrl, async (client) => {
    await client.query(
      `SELECT setval('pgfence.token_seq', 100) FROM pgfence.token_seq WHERE last_value < 100`,
    )
  })
}

/** What invoice 99 ended as: its status, or in the split-brain round who paid it. */
async function finalValueOf(name: RoundName, env: DemoEnvironment): Promise<string> {
  return withClient(env.databaseUrl, async (client) => {
    if (name !== 'split-brain') {
      const { rows } = await client.query('SELECT status FROM invoices WHERE id = 99')
      return rows[0].status as string
    }
    const { rows } = await client.query(
      `SELECT paid_by || coalesce(' (ledger: ' || (SELECT string_agg(leader, ', ' ORDER BY id)
         FROM ledger_entries WHERE invoice_id = 99) || ')', '') AS paid
       FROM payouts WHERE invoice_id = 99`,
    )
    return rows[0].paid as string
  })
}

/** The task of each worker of a round; `store` where its leases live. */
function taskOf(name: RoundName, env: DemoEnvironment, ttlMs: number) {
  const keyPrefix = `pgfence:demo:${randomBytes(4).toString('hex')}:`
  return (role: DemoTask['role'], value: string, store: WorkerStore): DemoTask => ({
    round: name,
    role,
    value,
    resource: name === 'split-brain' ? billingResource : 'invoice:99',
    store,
    keyPrefix,
    databaseUrl: env.databaseUrl,
    writeUrl: name === 'naive' || name === 'lease' ? unfencedUrl(env.databaseUrl) : env.proxyUrl,
    ttlMs,
  })
}

const withToken = (token: string | null) => (token ? ` with token ${token}` : '')

/** A worker that writes `value` presenting `token`, drawn on `lane`. */
interface Writer {
  worker: Worker
  lane: WorkerLane
  value: string
  token: string | null
}

/** The write of `writer`, from `about-to-write` to its outcome, as an event. */
async function writeOf(timeline: Timeline, writer: Writer, lead: string): Promise<WriteEvent> {
  const { outcome, said } = outcomeOf(await writer.worker.next())
  const { lane, value, token } = writer
  return timeline.add({
    kind: 'write',
    lane,
    value,
    token,
    outcome,
    text: `${lead}: ${said}`,
  }) as WriteEvent
}

/** The round's result once its workers are done: the row's final value closes the timeline. */
async function resultOf(
  name: RoundName,
  env: DemoEnvironment,
  timeline: Timeline,
  staleWrite: WriteEvent,
  ttlMs: number,
): Promise<RoundResult> {
  const finalValue = await finalValueOf(name, env)
  const expected = name === 'split-brain' ? `${secondValue} (ledger: ${secondValue})` : secondValue
  const corrupted = finalValue !== expected
  // A stale write that went through overwrote the newer holder's: the row is corrupted.
  if (corrupted && staleWrite.outcome === 'committed') staleWrite.outcome = 'corrupted'
  timeline.add({ kind: 'final', lane: 'database', value: finalValue, text: `final: ${finalValue}` })
  return {
    name,
    finalValue,
    corrupted,
    staleWriteCode: staleWrite.outcome === 'corrupted' ? null : staleWrite.outcome,
    ttlMs,
    events: timeline.events.sort((a, b) => a.atMs - b.atMs),
  }
}

/**
 * The grant `worker` reports, as an event whose line `says` (given " with token N"); the worker
 * is then a writer of `value`.
 */
async function grantOf(
  timeline: Timeline,
  worker: Worker,
  lane: WorkerLane,
  value: string,
  says: (withToken: string) => string,
): Promise<Writer & { grantedAtMs: number }> {
  const { token } = await worker.expect('acquired')
  const grant = timeline.add({ kind: 'grant', lane, token, text: says(withToken(token)) })
  return { worker, lane, value, token, grantedAtMs: grant.atMs }
}

/**
 * A GC-pause round: worker 1 takes the lease and is frozen with SIGSTOP right before writing A;
 * worker 2 takes the lease once it expired and writes B; worker 1 wakes and writes A.
 */
export async function playPauseRound(
  name: (typeof pauseRounds)[number],
  env: DemoEnvironment,
  say: (line: string) => void,
): Promise<RoundResult> {
  await resetInvoice(env)
  const timeline = new Timeline(say)
  const { ttlMs, freezeMs } = env.timing
  const task = taskOf(name, env, ttlMs)
  const first = startWorker(task('first', firstValue, env.store), env.interrupted)
  const second = startWorker(task('second', secondValue, env.store), env.interrupted)
  const subject = name === 'split-brain' ? 'the nightly billing run' : 'invoice 99'
  let staleWrite: WriteEvent
  try {
    const writer1 = await grantOf(
      timeline,
      first,
      'worker 1',
      firstValue,
      (token) => `worker 1 takes the lease on ${subject}${token}`,
    )
    await first.expect('about-to-write')
    first.process.kill('SIGSTOP')
    const frozenAt = timeline.now()
    timeline.tell(
      `worker 1 ${name === 'naive' ? 'is about to write' : 'checks its lease: still valid'}; frozen (SIGSTOP)`,
    )
    const thawAt = delay(freezeMs, undefined, { signal: env.interrupted })
    thawAt.catch(() => {}) // awaited below, unless the round fails before

    second.process.send('go')
    const raises = name === 'split-brain' ? ' and raises the fence' : ''
    const writer2 = await grantOf(
      timeline,
      second,
      'worker 2',
      secondValue,
      (token) => `worker 2 takes the lease after it expired${token}${raises}`,
    )
    timeline.addPast({
      kind: 'expiry',
      atMs: writer1.grantedAtMs + ttlMs,
      lane: 'lock service',
      holder: 'worker 1',
      text: `worker 1's lease expires (not renewed)`,
    })
    await second.expect('about-to-write')
    await writeOf(timeline, writer2, 'worker 2 writes B')
    await second.finish(workerExitMs)

    await thawAt
    first.process.kill('SIGCONT')
    first.process.stdin!.end('\n')
    timeline.addPast({
      kind: 'pause',
      atMs: frozenAt,
      endMs: timeline.now(),
      lane: 'worker 1',
      text: `worker 1 frozen (SIGSTOP) for ${freezeMs / 1000} s`,
    })
    timeline.tell(`worker 1 wakes (SIGCONT) and writes ${firstValue}`)
    staleWrite = await writeOf(timeline, writer1, `worker 1's late write`)
    await first.finish(workerExitMs)
  } finally {
    // Whatever failed, no worker outlives its round (a frozen one holds stdout open).
    await Promise.all([first.stop(), second.stop()])
  }
  return resultOf(name, env, timeline, staleWrite, ttlMs)
}

/**
 * The Redis failover: worker 1 takes the lease on the primary, whose replica is held back; the
 * primary dies before the key reached the replica; Sentinel promotes the replica, where worker 2
 * takes the same lease. Both hold it and both write through pgfence: B with the higher token
 * first, then A, which gets PF409.
 */
export async function playFailoverRound(
  env: DemoEnvironment,
  say: (line: string) => void,
): Promise<RoundResult> {
  await resetInvoice(env)
  const timeline = new Timeline(say)
  const redis = await startRedisFailover(env.interrupted)
  const workers: Worker[] = []
  let staleWrite: WriteEvent
  try {
    redis.holdBackReplica()
    timeline.add({
      kind: 'service',
      lane: 'lock service',
      text: 'Redis primary, replica and Sentinel up; the replica is held back',
    })
    const task = taskOf('redis-failover', env, failoverTtlMs)
    const primary = { redis: redis.primaryUrl }
    const first = startWorker(task('first', firstValue, primary), env.interrupted)
    const sentinel = { sentinel: redis.sentinelOptions }
    const second = startWorker(task('second', secondValue, sentinel), env.interrupted)
    workers.push(first, second)
    const writer1 = await grantOf(
      timeline,
      first,
      'worker 1',
      firstValue,
      (token) => `worker 1 takes the lease on invoice 99 on the primary${token}`,
    )
    await redis.failOver(() =>
      timeline.add({
        kind: 'service',
        lane: 'lock service',
        text: 'the primary dies before the key reached the replica',
      }),
    )
    timeline.add({ kind: 'service', lane: 'lock service', text: 'Sentinel promotes the replica' })
    second.process.send('go')
    const writer2 = await grantOf(
      timeline,
      second,
      'worker 2',
      secondValue,
      (token) => `worker 2 takes the same lease on the new primary${token}: both hold it`,
    )
    second.process.send('write')
    await second.expect('about-to-write')
    await writeOf(timeline, writer2, 'worker 2 writes B')
    first.process.send('write')
    await first.expect('about-to-write')
    staleWrite = await writeOf(timeline, writer1, 'worker 1, still holding its lease, writes A')
  } finally {
    // Worker 1's store is gone: it is not waited for while it gives up its release.
    await Promise.all(workers.map((worker) => worker.stop()))
    await redis.stop()
  }
  return resultOf('redis-failover', env, timeline, staleWrite, failoverTtlMs)
}
