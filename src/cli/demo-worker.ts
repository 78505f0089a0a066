import { once } from 'node:events'
import { readSync } from 'node:fs'
import { Redis } from 'ioredis'
import pg from 'pg'
import { LeaseManager, type LeaseStoreOption } from '../lease/index.js'

export type RoundName = 'naive' | 'lease' | 'fenced' | 'split-brain' | 'redis-failover'

/**
 * Where a worker's leases live: the demo's lease store, or in the redis-failover round a Redis
 * found through Sentinel.
 */
export type WorkerStore =
  | { postgres: string }
  | { redis: string }
  | { etcd: string[] }
  | { sentinel: { sentinels: Array<{ host: string; port: number }>; name: string } }

/**
 * One worker of `pgfence demo`: takes the lease on invoice 99 and writes its value. In the
 * split-brain round it is a leader of the nightly billing run instead: it takes the lease on
 * the run's resource, raises its fence, and pays invoice 99 in one transaction over two tables.
 */
export interface DemoTask {
  round: RoundName
  /** In the GC-pause rounds the first worker is frozen between its last check and its write. */
  role: 'first' | 'second'
  value: string
  /** What the lease is on: invoice 99, or the billing run's resource in the split-brain round. */
  resource: string
  store: WorkerStore
  keyPrefix: string
  /** Straight to PostgreSQL: the token source. */
  databaseUrl: string
  /** Where the write goes: PostgreSQL, or pgfence in the fenced rounds. */
  writeUrl: string
  ttlMs: number
}

export type DemoEvent =
  | { event: 'acquired'; token: string | null }
  | { event: 'about-to-write' }
  | { event: 'wrote' }
  | { event: 'refused'; code: string | null; message: string }
  /** Anything else that went wrong; the worker then exits 1, the demo says why in one line. */
  | { event: 'failed'; message: string }

interface HeldLock {
  /** The token the write presents; null in the naive round, which presents none. */
  token: bigint | null
  /** The last look before writing; a lease throws here once it is lost. */
  check(): void
  /** Releases the lease if it is still held, and closes the store's connections. */
  close(): Promise<void>
}

/** The store option of `store`, and how to close what the LeaseManager leaves open. */
function leaseStoreOf(store: WorkerStore): { option: LeaseStoreOption; close: () => void } {
  if (!('sentinel' in store)) return { option: store, close: () => {} }
  const redis = new Redis({ ...store.sentinel, maxRetriesPerRequest: 1 })
  redis.on('error', () => {}) // a command fails with it, and the worker reports that
  return { option: { redis }, close: () => redis.disconnect() }
}

async function takeLease(task: DemoTask, db: pg.Client): Promise<HeldLock> {
  const store = leaseStoreOf(task.store)
  const leases = new LeaseManager({
    store: store.option,
    tokenSource: task.databaseUrl,
    ttlMs: task.ttlMs,
    keyPrefix: task.keyPrefix,
  })
  leases.on('connectionError', () => {}) // a request fails with it, and the worker reports that
  const lease = await leases.acquire(task.resource, { waitMs: Math.min(task.ttlMs * 5, 10_000) })
  const fenced = task.round !== 'naive' && task.round !== 'lease'
  if (fenced) await lease.applyTo(db)
  // A new leader's first act: from now on, an older leader's writes to the run's tables fail.
  if (task.round === 'split-brain') await lease.raiseFence(db)
  return {
    // The naive round uses the lease as most code uses a lock: no token, no check.
    token: task.round === 'naive' ? null : lease.token,
    check: () => {
      if (task.round !== 'naive') lease.signal.throwIfAborted()
    },
    close: async () => {
      await leases.close()
      store.close()
    },
  }
}

/**
 * Blocks the whole process, event loop included, until the parent writes a byte to stdin. The
 * parent freezes the worker with SIGSTOP while it waits here, so the pause lands exactly
 * between the check and the write, as a GC pause would. End of input: the parent is gone.
 */
function waitForParent(): void {
  const byte = Buffer.alloc(1)
  for (;;) {
    try {
      const read = readSync(0, byte, 0, 1, null)
      if (read === 1) return
      if (read === 0) process.exit(1)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err
    }
  }
}

function report(event: DemoEvent): void {
  process.send!(event)
}

async function setStatus(db: pg.Client, value: string): Promise<void> {
  await db.query('UPDATE invoices SET status = $1 WHERE id = 99', [value])
}

/** The billing run's write: a ledger entry and the payout, both or neither. */
async function payInvoice(db: pg.Client, leader: string): Promise<void> {
  await db.query('BEGIN')
  try {
    await db.query('INSERT INTO ledger_entries (invoice_id, leader) VALUES (99, $1)', [leader])
    await db.query('UPDATE payouts SET paid_by = $1 WHERE invoice_id = 99', [leader])
    await db.query('COMMIT')
  } catch (err) {
    await db.query('ROLLBACK')
    throw err
  }
}

async function work(task: DemoTask): Promise<void> {
  const db = new pg.Client({ connectionString: task.writeUrl })
  await db.connect()
  // The second worker starts with the first, but goes for the lease only once told to.
  if (task.role === 'second') await once(process, 'message')
  const lock = await takeLease(task, db)
  report({ event: 'acquired', token: lock.token?.toString() ?? null })
  // Across a failover both hold the lease: the parent tells each when to write.
  if (task.round === 'redis-failover') await once(process, 'message')
  lock.check()
  report({ event: 'about-to-write' })
  if (task.role === 'first' && task.round !== 'redis-failover') waitForParent()
  try {
    await (task.round === 'split-brain' ? payInvoice(db, task.value) : setStatus(db, task.value))
    report({ event: 'wrote' })
  } catch (err) {
    const { code, message } = err as { code?: string; message: string }
    report({ event: 'refused', code: code ?? null, message })
  }
  await lock.close()
  await db.end()
  process.disconnect()
}

try {
  await work(JSON.parse(process.argv[2] ?? '') as DemoTask)
} catch (err) {
  report({ event: 'failed', message: (err as Error).message })
  process.exitCode = 1
  process.disconnect()
}
