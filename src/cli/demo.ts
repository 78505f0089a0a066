import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Redis } from 'ioredis'
import { parseConfig } from '../config/load.js'
import { dropDemoDatabase, withClient } from '../dev/demo-database.js'
import { startEmbeddedServer } from '../dev/embedded-postgres.js'
import { missingRedisBinary } from '../dev/redis-failover.js'
import { createLogger } from '../log.js'
import { startProxy } from '../proxy/proxy-server.js'
import { timelinePage, type PlayedDemo } from './demo-html.js'
import {
  billingResource,
  pauseTiming,
  pauseRounds,
  playFailoverRound,
  playPauseRound,
  roundStory,
  type DemoEnvironment,
  type RoundResult,
} from './demo-rounds.js'
import type { RoundName, WorkerStore } from './demo-worker.js'

const allRounds: RoundName[] = [...pauseRounds, 'redis-failover']
const stores = ['postgres', 'redis', 'etcd'] as const
type StoreName = (typeof stores)[number]

export const usage = `usage: pgfence demo [--store postgres|redis|etcd] [--rounds LIST] [--json] [--html FILE]
                   [--redis-url URL] [--etcd-endpoints URLS] [--database-url URL]

The GC-pause story with real processes, and a Redis failover that grants one lease twice.
  --store NAME         where the leases live: postgres (default: the demo database itself,
                       nothing else to run), redis (--redis-url) or etcd (--etcd-endpoints)
  --rounds LIST        which rounds, comma-separated (default: all): naive, lease, fenced,
                       split-brain, redis-failover (which starts a Redis primary, replica and
                       Sentinel of its own: redis-server, redis-sentinel)
  --json               print the rounds and their events as JSON
  --html FILE          draw the rounds as a timeline in one self-contained HTML page
  --redis-url URL      the Redis of --store redis (default redis://127.0.0.1:6379)
  --etcd-endpoints URLS
                       the etcd of --store etcd, comma-separated (default http://127.0.0.1:2379)
  --database-url URL   a PostgreSQL server to use (default: an embedded one); the demo runs in a
                       database of its own there, pgfence_demo_<random>, created through this
                       URL's database and dropped at the end (the role needs CREATEDB)`

function resultTable(results: RoundResult[]): string {
  const rows = [
    ['round', 'lock', 'write path', 'expected', 'stale write', 'final', 'outcome'],
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

/** Before anything starts: an etcd none of whose endpoints is healthy is one line and the end. */
async function checkEtcd(endpoints: string[]): Promise<void> {
  let reason = 'no endpoint'
  for (const endpoint of endpoints) {
    try {
      const health = await fetch(new URL('/health', endpoint), {
        signal: AbortSignal.timeout(2000),
      })
      if (health.ok) return
      reason = `${health.status} ${health.statusText}`
    } catch (err) {
      reason = ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message
    }
  }
  throw new Error(
    `etcd at ${endpoints.map(addressOf).join(', ')} does not answer (${reason}); start it or pass --etcd-endpoints`,
  )
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

/** A wrong option: exit 2, like a parse error of the arguments. */
class DemoUsageError extends Error {}

interface DemoOptions {
  store: StoreName
  redisUrl: string
  etcdEndpoints: string[]
  databaseUrl: string | undefined
  rounds: RoundName[]
}

/** The rounds of `--rounds`, in the demo's order; an unknown name is an error. */
function parseRounds(list: string | undefined): RoundName[] {
  if (list === undefined) return allRounds
  const names = list.split(',').map((name) => name.trim())
  const unknown = names.find((name) => !allRounds.includes(name as RoundName))
  if (unknown !== undefined) {
    throw new DemoUsageError(
      `unknown round ${JSON.stringify(unknown)}; rounds: ${allRounds.join(', ')}`,
    )
  }
  return allRounds.filter((name) => names.includes(name))
}

async function playDemo(
  options: DemoOptions,
  say: (line: string) => void,
  interrupted: AbortSignal,
) {
  if (options.store === 'redis') await checkRedis(options.redisUrl)
  if (options.store === 'etcd') await checkEtcd(options.etcdEndpoints)
  const server = await openServer(options.databaseUrl)
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
      const store: WorkerStore =
        options.store === 'redis'
          ? { redis: options.redisUrl }
          : options.store === 'etcd'
            ? { etcd: options.etcdEndpoints }
            : { postgres: direct.toString() }
      const env: DemoEnvironment = {
        store,
        timing: pauseTiming(options.store),
        adminUrl: server.adminUrl,
        databaseUrl: direct.toString(),
        proxyUrl: proxied.toString(),
        fencing: config.fencing,
        interrupted,
      }
      const rounds: RoundResult[] = []
      const skipped: PlayedDemo['skipped'] = []
      for (const name of options.rounds) {
        const story = roundStory[name]
        say(`\nround ${name}: ${story.lock}, writes to ${story.path}`)
        if (name !== 'redis-failover') {
          rounds.push(await playPauseRound(name, env, say))
          continue
        }
        const missing = missingRedisBinary()
        if (missing === null) {
          rounds.push(await playFailoverRound(env, say))
          continue
        }
        const reason = `${missing} is not installed (Debian: apt-get install redis-server redis-sentinel)`
        say(`  skipped: ${reason}`)
        skipped.push({ name, reason })
      }
      return { store: options.store, rounds, skipped }
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
 * `pgfence demo`: the GC-pause story with real processes. Worker 1 takes a 1 s lease on invoice
 * 99 and is frozen with SIGSTOP for 1.5 s right before writing A; worker 2 takes the lease once
 * it expired and writes B; worker 1 wakes and writes A. Four such rounds: a lease used as a
 * plain lock, a lease alone, a lease token checked by pgfence on the invoice row, and a split
 * brain of two billing leaders whose run writes two tables fenced by one resource (the new
 * leader raises the fence first). A fifth, redis-failover, grants one lease twice across a
 * Sentinel failover, and pgfence keeps the stale write out.
 */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      json: { type: 'boolean', default: false },
      html: { type: 'string' },
      store: { type: 'string', default: 'postgres' },
      rounds: { type: 'string' },
      'redis-url': { type: 'string', default: 'redis://127.0.0.1:6379' },
      'etcd-endpoints': { type: 'string', default: 'http://127.0.0.1:2379' },
      'database-url': { type: 'string' },
    },
  })
  let options: DemoOptions
  try {
    if (!stores.includes(values.store as StoreName)) {
      throw new DemoUsageError(
        `unknown store ${JSON.stringify(values.store)}; stores: ${stores.join(', ')}`,
      )
    }
    options = {
      store: values.store as StoreName,
      redisUrl: values['redis-url'],
      etcdEndpoints: values['etcd-endpoints'].split(',').map((url) => url.trim()),
      databaseUrl: values['database-url'],
      rounds: parseRounds(values.rounds),
    }
  } catch (err) {
    process.stderr.write(`pgfence demo: ${(err as Error).message}\n`)
    return 2
  }
  const say = values.json ? () => {} : (line: string) => void process.stdout.write(`${line}\n`)
  const { ttlMs, freezeMs } = pauseTiming(options.store)
  say(
    `pgfence demo: leases in ${options.store}, ${ttlMs / 1000} s; worker 1 frozen for ${freezeMs / 1000} s`,
  )
  const interruption = new AbortController()
  const interrupt = (signal: NodeJS.Signals) =>
    interruption.abort(new Error(`interrupted by ${signal}`))
  process.on('SIGINT', interrupt).on('SIGTERM', interrupt)
  let played: Awaited<ReturnType<typeof playDemo>>
  try {
    played = await playDemo(options, say, interruption.signal)
    if (values.html !== undefined) writeFileSync(values.html, timelinePage(played))
  } catch (err) {
    process.stderr.write(`pgfence demo: ${(err as Error).message}\n`)
    return 1
  } finally {
    process.off('SIGINT', interrupt).off('SIGTERM', interrupt)
  }
  if (values.json) process.stdout.write(`${JSON.stringify(played, null, 2)}\n`)
  else say(`\n${resultTable(played.rounds)}`)
  if (values.html !== undefined) say(`timeline written to ${values.html}`)
  return 0
}
