import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { readSync } from 'node:fs'
import { Redis } from 'ioredis'
import pg from 'pg'
import { LeaseManager } from '../lease/index.js'

/**
 * One worker of `pgfence demo`: takes the lock on invoice 99 and writes its value. In the
 * split-brain round it is a leader of the nightly billing run instead: it takes the lease on
 * the run's resource, raises its fence, and pays invoice 99 in one transaction over two tables.
 */
export interface DemoTask {
  round: 'naive' | 'lease' | 'fenced' | 'split-brain'
  /** The first worker is frozen between its last check and its write. */
  role: 'first' | 'second'
  value: string
  /** What the lock is on: invoice 99, or the billing run's resource in the split-brain round. */
  resource: string
  redisUrl: string
  keyPrefix: string
  /** Straight to PostgreSQL: the token source. */
  databaseUrl: string
  /** Where the write goes: PostgreSQL, or pgfence in the fenced round. */
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
  token: bigint | null
  /** The last look before writing; a lease throws here once it is lost. */
  check(): void
  release(): Promise<void>
}

/** `SET NX PX` and nothing else: the lock most code uses. */
async function naiveLock(task: DemoTask): Promise<HeldLock> {
  const redis = new Redis(task.redisUrl, { maxRetriesPerRequest: 1 })
  redis.on('error', () => {}) // a command fails with it, and the worker reports that
  const key = task.keyPrefix + task.resource
  const owner = randomUUID()
  while ((await redis.set(key, owner, 'PX', task.ttlMs, 'NX')) !== 'OK') {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return {
    token: null,
    check: () => {},
    release: async () => {
      if ((await redis.get(key)) === owner) await redis.del(key)
      redis.disconnect()
    },
  }
}

async function leaseLock(task: DemoTask, db: pg.Client): Promise<HeldLock> {
  const leases = new LeaseManager({
    redis: task.redisUrl,
    tokenSource: task.databaseUrl,
    ttlMs: task.ttlMs,
    keyPrefix: task.keyPrefix,
  })
  const lease = await leases.acquire(task.resource, { waitMs: task.ttlMs * 5 })
  if (task.round === 'fenced' || task.round === 'split-brain') await lease.applyTo(db)
  // A new leader's first act: from now on, an older leader's writes to the run's tables fail.
  if (task.round === 'split-brain') await lease.raiseFence(db)
  return {
    token: lease.token,
    check: () => lease.signal.throwIfAborted(),
    release: async () => {
      await lease.release()
      await leases.close()
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
  // The second worker starts with the first, but goes for the lock only once told to.
  if (task.role === 'second') await once(process, 'message')
  const lock = task.round === 'naive' ? await naiveLock(task) : await leaseLock(task, db)
  report({ event: 'acquired', token: lock.token?.toString() ?? null })
  lock.check()
  report({ event: 'about-to-write' })
  if (task.role === 'first') waitForParent()
  try {
    await (task.round === 'split-brain' ? payInvoice(db, task.value) : setStatus(db, task.value))
    report({ event: 'wrote' })
  } catch (err) {
    const { code, message } = err as { code?: string; message: string }
    report({ event: 'refused', code: code ?? null, message })
  }
  await lock.release()
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
