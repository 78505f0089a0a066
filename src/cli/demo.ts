import { fork, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as delay } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { Redis } from 'ioredis'
import { parseConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import {
  dropDemoDatabase,
  prepareDemoDatabase,
  unfencedUrl,
  withClient,
} from '../dev/demo-database.js'
import { startEmbeddedServer } from '../dev/embedded-postgres.js'
import { createLogger } from '../log.js'
import { startProxy } from '../proxy/proxy-server.js'
import type { DemoEvent, DemoTask } from './demo-worker.js'

type RoundName = DemoTask['round']

export interface RoundResult {
  name: RoundName
  finalValue: string
  corrupted: boolean
  /** SQLSTATE the late write got, or null when it went through. */
  staleWriteCode: string | null
}

export const usage = `usage: pgfence demo [--json] [--redis-url URL] [--database-url URL]

The GC-pause story with real processes, in four rounds.
  --json               print the rounds as JSON
  --redis-url URL      the Redis the locks live in (default redis://127.0.0.1:6379)
  --database-url URL   a PostgreSQL server to use (default: an embedded one); the demo runs in a
                       database of its own there, pgfence_demo_<random>, created through this
                       URL's database and dropped at the end (the role needs CREATEDB)`

interface DemoEnvironment {
  redisUrl: string
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

const leaseTtlMs = 1000
const freezeMs = 1500
const firstValue = 'A'
const secondValue = 'B'

const roundStory: Record<RoundName, { lock: string; path: string; expected: string }> = {
  naive: { lock: 'Redis SET NX PX, no token', path: 'PostgreSQL', expected: 'corrupted' },
  lease: { lock: 'LeaseManager, signal checked', path: 'PostgreSQL', expected: 'corrupted' },
  fenced: { lock: 'LeaseManager token', path: 'pgfence', expected: 'PF409, B stays' },
  'split-brain': {
    lock: 'LeaseManager, raiseFence',
    path: 'pgfence, resource fence',
    expected: 'PF409, B stays',
  },
}

/** The resource that fences the billing run's tables in the split-brain round. */
const billingResource = 'nightly-billing'

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
    void this.exited.then(() => this.waiting?.())
    interrupted.addEventListener('abort', () => this.waiting?.(), { once: true })
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

function describeWrite(event: DemoEvent): string {
  if (event.event === 'wrote') return 'committed'
  if (event.event === 'refused') return `refused with ${event.code}: ${event.message}`
  return `unexpected ${event.event}`
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

async function playRound(
  name: RoundName,
  env: DemoEnvironment,
  say: (line: string) => void,
): Promise<RoundResult> {
  await resetInvoice(env)
  const startedAt = performance.now()
  const at = (line: string) =>
    say(`  ${((performance.now() - startedAt) / 1000).toFixed(2)}s  ${line}`)
  const keyPrefix = `pgfence:demo:${randomBytes(4).toString('hex')}:`
  const task = (role: DemoTask['role'], value: string): DemoTask => ({
    round: name,
    role,
    value,
    resource: name === 'split-brain' ? billingResource : 'invoice:99',
    redisUrl: env.redisUrl,
    keyPrefix,
    databaseUrl: env.databaseUrl,
    writeUrl: name === 'naive' || name === 'lease' ? unfencedUrl(env.databaseUrl) : env.proxyUrl,
    ttlMs: leaseTtlMs,
  })
  const first = startWorker(task('first', firstValue), env.interrupted)
  const second = startWorker(task('second', secondValue), env.interrupted)
  const tokenOf = (event: DemoEvent) =>
    event.event === 'acquired' && event.token ? ` with token ${event.token}` : ''
  const subject = name === 'split-brain' ? 'the nightly billing run' : 'invoice 99'
  let lateWrite: DemoEvent
  try {
    at(`worker 1 takes the lock on ${subject}${tokenOf(await first.next())}`)
    await first.next()
    first.process.kill('SIGSTOP')
    at(
      `worker 1 ${name === 'naive' ? 'is about to write' : 'checks its lease: still valid'}; frozen (SIGSTOP)`,
    )
    const thawAt = delay(freezeMs, undefined, { signal: env.interrupted })
    thawAt.catch(() => {}) // awaited below, unless the round fails before

    second.process.send('go')
    const raises = name === 'split-brain' ? ' and raises the fence' : ''
    at(`worker 2 takes the lock after it expired${tokenOf(await second.next())}${raises}`)
    await second.next()
    at(`worker 2 writes ${secondValue}: ${describeWrite(await second.next())}`)
    await second.exited

    await thawAt
    first.process.kill('SIGCONT')
    first.process.stdin!.end('\n')
    at(`worker 1 wakes (SIGCONT) and writes ${firstValue}`)
    lateWrite = await first.next()
    at(`worker 1's late write: ${describeWrite(lateWrite)}`)
    await first.exited
  } finally {
    // Whatever failed, no worker outlives its round (a frozen one holds stdout open).
    await Promise.all([first.stop(), second.stop()])
  }

  const finalValue = await finalValueOf(name, env)
  return {
    name,
    finalValue,
    corrupted:
      finalValue !==
      (name === 'split-brain' ? `${secondValue} (ledger: ${secondValue})` : secondValue),
    staleWriteCode: lateWrite.event === 'refused' ? lateWrite.code : null,
  }
}

function resultTable(results: RoundResult[]): string {
  const rows = [
    ['round', 'lock', 'write path', 'expected', 'late write', 'final', 'outcome'],
    ...results.map((result) => {
      const story = roundStory[result.name]
      return [
        result.name,
        story.lock,
        story.path,
        story.expected,
        result.staleWriteCode ?? 'committed',
        result.finalValue,
        result.corrupted ? 'CORRUPTED' : 'correct',
      ]
    }),
  ]
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)))
  return rows
    .map((row) => `| ${row.map((cell, column) => cell.padEnd(widths[column]!)).join(' | ')} |`)
    .join('\n')
}

/** Builds a URL for another database on the same server as `url`. */
function sameServer(url: string): (database: string) => string {
  return (database) => {
    const other = new URL(url)
    other.pathname = `/${database}`
    return other.toString()
  }
}

/** `host:port` of a URL, for a message. */
function addressOf(url: string): string {
  const { hostname, port } = new URL(url)
  return `${hostname}:${port || 'default port'}`
}

/** Before anything starts: a Redis that does not answer a PING is one line and the end. */
async function checkRedis(url: string): Promise<void> {
  const redis = new Redis(url, {
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableReadyCheck: false,
    connectTimeout: 2000,
    commandTimeout: 2000,
    // ioredis would keep a timer for the closed socket of a failed connection.
    disconnectTimeout: 0,
  })
  // connect() rejects only with 'Connection is closed.': the reason comes as an error event.
  let connectionError: Error | undefined
  redis.on('error', (err: Error) => (connectionError = err))
  try {
    await redis.connect()
    await redis.ping()
  } catch (err) {
    const reason = (connectionError ?? (err as Error)).message
    throw new Error(
      `Redis at ${addressOf(url)} does not answer (${reason}); start it or pass --redis-url`,
    )
  } finally {
    redis.disconnect()
  }
}

/**
 * The PostgreSQL server: the one given, reached through the database its URL names, or an
 * embedded one in a temp dir removed afterwards.
 */
async function openServer(databaseUrl: string | undefined) {
  if (databaseUrl) {
    await withClient(databaseUrl, async () => {}).catch((err: Error) => {
      throw new Error(
        `cannot connect to PostgreSQL at ${addressOf(databaseUrl)} (${err.message}); check --database-url`,
      )
    })
    return { adminUrl: databaseUrl, urlOf: sameServer(databaseUrl), stop: async () => {} }
  }
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-demo-'))
  // As root the server runs as the postgres user, which must reach its data directory.
  chmodSync(dir, 0o755)
  const server = await startEmbeddedServer(join(dir, 'data'))
  return {
    adminUrl: server.url('postgres'),
    urlOf: server.url,
    stop: async () => {
      await server.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function playDemo(
  redisUrl: string,
  databaseUrl: string | undefined,
  say: (line: string) => void,
  interrupted: AbortSignal,
) {
  await checkRedis(redisUrl)
  const server = await openServer(databaseUrl)
  // A database of its own, so that a server's own invoices are never touched.
  const direct = new URL(server.urlOf(`pgfence_demo_${randomBytes(4).toString('hex')}`))
  try {
    const config = parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      upstream: { host: direct.hostname, port: Number(direct.port || 5432), tls: 'disable' },
      limits: { shutdownTimeoutMs: 2000 },
      fencing: {
        tables: [{ name: 'invoices' }],
        resources: [{ tables: ['payouts', 'ledger_entries'], resource: billingResource }],
      },
    })
    const proxy = await startProxy(config, { logger: createLogger('silent') })
    try {
      const proxied = new URL(direct)
      proxied.hostname = proxy.host
      proxied.port = String(proxy.port)
      const env: DemoEnvironment = {
        redisUrl,
        adminUrl: server.adminUrl,
        databaseUrl: direct.toString(),
        proxyUrl: proxied.toString(),
        fencing: config.fencing,
        interrupted,
      }
      const results: RoundResult[] = []
      for (const name of ['naive', 'lease', 'fenced', 'split-brain'] as const) {
        const story = roundStory[name]
        say(`\nround ${name}: ${story.lock}, writes to ${story.path}`)
        results.push(await playRound(name, env, say))
      }
      return results
    } finally {
      await proxy.close()
    }
  } finally {
    try {
      await dropDemoDatabase(server.adminUrl, direct.toString())
    } finally {
      await server.stop()
    }
  }
}

/**
 * `pgfence demo`: the GC-pause story with real processes. Worker 1 takes a 1 s lock on invoice 99
 * and is frozen with SIGSTOP for 1.5 s right before writing A; worker 2 takes the lock once it
 * expired and writes B; worker 1 wakes and writes A. Four rounds: a naive lock, a lease alone,
 * a lease token checked by pgfence on the invoice row, and a split brain of two billing leaders
 * whose run writes two tables fenced by one resource (the new leader raises the fence first).
 */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      json: { type: 'boolean', default: false },
      'redis-url': { type: 'string', default: 'redis://127.0.0.1:6379' },
      'database-url': { type: 'string' },
    },
  })
  const say = values.json ? () => {} : (line: string) => void process.stdout.write(`${line}\n`)
  say(`pgfence demo: lease ${leaseTtlMs / 1000} s, worker 1 frozen for ${freezeMs / 1000} s`)
  const interruption = new AbortController()
  const interrupt = (signal: NodeJS.Signals) =>
    interruption.abort(new Error(`interrupted by ${signal}`))
  process.on('SIGINT', interrupt).on('SIGTERM', interrupt)
  let rounds: RoundResult[]
  try {
    rounds = await playDemo(values['redis-url'], values['database-url'], say, interruption.signal)
  } catch (err) {
    process.stderr.write(`pgfence demo: ${(err as Error).message}\n`)
    return 1
  } finally {
    process.off('SIGINT', interrupt).off('SIGTERM', interrupt)
  }
  if (values.json) process.stdout.write(`${JSON.stringify({ rounds }, null, 2)}\n`)
  else say(`\n${resultTable(rounds)}`)
  return 0
}
