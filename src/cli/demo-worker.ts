import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { readSync } from 'node:fs'
import { Redis } from 'ioredis'
import pg from 'pg'
import { LeaseManager } from '../lease/index.js'

/** One worker of `pgfence demo`: takes the lock on invoice 99 and writes its value. */
export interface DemoTask {
  round: 'naive' | 'lease' | 'fenced'
  /** The first worker is frozen between its last check and its write. */
  role: 'first' | 'second'
  value: string
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

interface HeldLock {
  token: bigint | null
  /** The last look before writing; a lease throws here once it is lost. */
  check(): void
  release(): Promise<void>
}

const resource = 'invoice:99'

/** `SET NX PX` and nothing else: the lock most code uses. */
async function naiveLock(task: DemoTask): Promise<HeldLock> {
  const redis = new Redis(task.redisUrl)
  const key = task.keyPrefix + resource
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
  const lease = await leases.acquire(resource, { waitMs: task.ttlMs * 5 })
  if (task.round === 'fenced') await lease.applyTo(db)
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
 * between the check and the write, as a GC pause would.
 */
function waitForParent(): void {
  const byte = Buffer.alloc(1)
  for (;;) {
    try {
      if (readSync(0, byte, 0, 1, null) === 1) return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err
    }
  }
}

function report(event: DemoEvent): void {
  process.send!(event)
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
    await db.query('UPDATE invoices SET status = $1 WHERE id = 99', [task.value])
    report({ event: 'wrote' })
  } catch (err) {
    const { code, message } = err as { code?: string; message: string }
    report({ event: 'refused', code: code ?? null, message })
  }
  await lock.release()
  await db.end()
  process.disconnect()
}

await work(JSON.parse(process.argv[2] ?? '') as DemoTask)
