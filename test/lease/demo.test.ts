import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { RoundResult } from '../../src/cli/demo-rounds.js'
import type { PlayedDemo } from '../../src/cli/demo-html.js'
import { startFreezableProxy } from '../../src/dev/freezable-proxy.js'
import {
  adminQuery,
  createTestDatabase,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { elementsOf, parseTimelinePage } from './support/timeline-page.js'
import { redisUrl } from './support/lease-fixtures.js'
import { etcdUrl } from './support/lease-stores.js'
import { closedPort } from '../e2e/support/ports.js'

const run = promisify(execFile)

const pauseRounds = [
  { name: 'naive', finalValue: 'A', corrupted: true, staleWriteCode: null },
  { name: 'lease', finalValue: 'A', corrupted: true, staleWriteCode: null },
  { name: 'fenced', finalValue: 'B', corrupted: false, staleWriteCode: 'PF409' },
  { name: 'split-brain', finalValue: 'B (ledger: B)', corrupted: false, staleWriteCode: 'PF409' },
]
const failoverRound = {
  name: 'redis-failover',
  finalValue: 'B',
  corrupted: false,
  staleWriteCode: 'PF409',
}

/** A round's outcome, without its events. */
const outcome = ({ name, finalValue, corrupted, staleWriteCode }: RoundResult) => ({
  name,
  finalValue,
  corrupted,
  staleWriteCode,
})

let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('demo_server')
})

afterAll(async () => {
  await db?.drop()
})

async function demoDatabases(): Promise<Set<string>> {
  const { rows } = await adminQuery(
    "SELECT datname FROM pg_database WHERE datname ~ '^pgfence_demo'",
  )
  return new Set(rows.map((row) => row.datname as string))
}

interface DemoRun {
  code: number | null
  stdout: string
  stderr: string
  /** From the start to the close of the demo's stdout and stderr, which its workers share. */
  elapsedMs: number
}

/** Runs `pgfence demo` with piped output; `onLine` sees each line of stdout as it comes. */
async function runDemo(
  args: string[],
  onLine: (line: string, demo: ChildProcess) => void = () => {},
  env: NodeJS.ProcessEnv = process.env,
): Promise<DemoRun> {
  const startedAt = performance.now()
  const demo = spawn(process.execPath, [inject('cliPath'), 'demo', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env,
  })
  let stdout = ''
  let stderr = ''
  createInterface({ input: demo.stdout }).on('line', (line) => {
    stdout += `${line}\n`
    onLine(line, demo)
  })
  demo.stderr.on('data', (chunk) => (stderr += chunk))
  const [code] = (await once(demo, 'close')) as [number | null]
  return { code, stdout, stderr, elapsedMs: performance.now() - startedAt }
}

/** Runs `pgfence demo --json` with `args`; its output, parsed. */
async function demoJson(args: string[]): Promise<PlayedDemo> {
  const { stdout } = await run(process.execPath, [inject('cliPath'), 'demo', '--json', ...args], {
    timeout: 120_000,
  })
  return JSON.parse(stdout) as PlayedDemo
}

describe('pgfence demo', () => {
  it('by default keeps its leases in PostgreSQL, needs no Redis, and --html draws every event of the run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pgfence-demo-html-'))
    try {
      const page = join(dir, 'timeline.html')
      // No Redis answers at --redis-url: the default store does not need one.
      const closed = `redis://127.0.0.1:${await closedPort()}`
      const demo = await demoJson(['--html', page, '--redis-url', closed])
      expect(demo.store).toBe('postgres')
      expect(demo.rounds.map(outcome)).toEqual([...pauseRounds, failoverRound])
      expect(demo.skipped).toEqual([])

      const document = parseTimelinePage(readFileSync(page, 'utf8'))
      const sections = elementsOf(document).filter((e) => e.tag === 'section')
      expect(sections.map((section) => section.attrs['data-round'])).toEqual(
        demo.rounds.map((round) => round.name),
      )
      for (const [i, round] of demo.rounds.entries()) {
        const section = sections[i]!
        expect(section.attrs['data-corrupted']).toBe(String(round.corrupted))
        // One SVG group per event of the run, with what happened as data and its line as title.
        const drawn = elementsOf(section.children)
          .filter((e) => e.tag === 'g' && e.attrs.class === 'event')
          .map((g) => ({
            ...g.attrs,
            title: elementsOf(g.children).find((e) => e.tag === 'title')?.text,
          }))
        const expected = round.events.map((event) => ({
          class: 'event',
          'data-kind': event.kind,
          'data-lane': event.lane,
          'data-at-ms': String(event.atMs),
          ...('token' in event ? { 'data-token': event.token ?? 'none' } : {}),
          ...(event.kind === 'write' ? { 'data-outcome': event.outcome } : {}),
          ...('value' in event ? { 'data-value': event.value } : {}),
          ...(event.kind === 'expiry' ? { 'data-holder': event.holder } : {}),
          ...(event.kind === 'pause' ? { 'data-end-ms': String(event.endMs) } : {}),
          title: event.text,
        }))
        // In drawing order (the pause bands first, behind the rest): compared as sets.
        const sorted = (groups: object[]) => groups.map((g) => JSON.stringify(g)).sort()
        expect(sorted(drawn)).toEqual(sorted(expected))
        const kinds = round.events.map((event) => event.kind)
        expect(kinds.filter((kind) => kind === 'grant')).toHaveLength(2)
        expect(kinds.filter((kind) => kind === 'write')).toHaveLength(2)
        expect(kinds).toContain('final')
        if (round.name !== 'redis-failover')
          expect(kinds).toEqual(expect.arrayContaining(['pause', 'expiry']))
        // The stale write is drawn with its outcome: corrupted, or refused with PF409.
        const stale = round.events.find((e) => e.kind === 'write' && e.lane === 'worker 1')
        expect(stale).toMatchObject({ outcome: round.corrupted ? 'corrupted' : 'PF409' })
      }
      // Self-contained: nothing to fetch, nothing to run.
      const all = elementsOf(document)
      expect(all.filter((e) => ['script', 'link', 'img', 'iframe'].includes(e.tag))).toEqual([])
      expect(all.filter((e) => e.attrs.src !== undefined || e.attrs.href !== undefined)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('--store redis --database-url: plays in a database of its own on that server, dropped at the end', async () => {
    const before = await demoDatabases()
    const demo = await demoJson([
      ...['--store', 'redis', '--redis-url', redisUrl(), '--database-url', db.url],
      ...['--rounds', 'naive,lease,fenced,split-brain'],
    ])
    expect(demo.store).toBe('redis')
    expect(demo.rounds.map(outcome)).toEqual(pauseRounds)
    const left = [...(await demoDatabases())].filter((name) => !before.has(name))
    expect(left).toEqual([])
    // The database the URL names is only connected to: no table, no pgfence schema.
    const { rows } = await queryOnce(
      db.url,
      `SELECT to_regclass('invoices') IS NULL AS "noInvoices",
              NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'pgfence') AS "noSchema"`,
    )
    expect(rows).toEqual([{ noInvoices: true, noSchema: true }])
  })

  it('--store etcd: the same story with the leases in etcd', async () => {
    const demo = await demoJson([
      ...['--store', 'etcd', '--etcd-endpoints', etcdUrl(), '--database-url', db.url],
      ...['--rounds', 'lease,fenced'],
    ])
    expect(demo.store).toBe('etcd')
    expect(demo.rounds.map(outcome)).toEqual(pauseRounds.slice(1, 3))
  })

  it('with etcd on a closed port: one line on stderr, exit 1', async () => {
    const port = await closedPort()
    const result = await runDemo([
      '--store',
      'etcd',
      '--etcd-endpoints',
      `http://127.0.0.1:${port}`,
    ])
    expect(result.stderr).toMatch(
      new RegExp(
        `^pgfence demo: etcd at 127\\.0\\.0\\.1:${port} does not answer \\(connect ECONNREFUSED [^\\n]*\\); start it or pass --etcd-endpoints\\n$`,
      ),
    )
    expect(result.code).toBe(1)
  })

  it('without redis-sentinel on PATH: the redis-failover round says so in one line', async () => {
    const result = await runDemo(
      ['--database-url', db.url, '--rounds', 'fenced,redis-failover'],
      () => {},
      { ...process.env, PATH: '/nonexistent' },
    )
    expect(result.code).toBe(0)
    expect(result.stderr).toBe('')
    const lines = result.stdout.split('\n')
    const round = lines.indexOf(
      'round redis-failover: LeaseManager on Redis + Sentinel, writes to pgfence',
    )
    expect(lines.slice(round + 1, round + 3)).toEqual([
      '  skipped: redis-server is not installed (Debian: apt-get install redis-server redis-sentinel)',
      '',
    ])
    expect(result.stdout).toMatch(/\| fenced +\| .* \| PF409 +\| B +\| correct +\|/)
  })

  it('an unknown round or store: one line, exit 2', async () => {
    for (const args of [
      ['--rounds', 'fenced,nope'],
      ['--store', 'zookeeper'],
    ]) {
      const result = await runDemo(args)
      expect(result.code).toBe(2)
      expect(result.stderr).toMatch(
        /^pgfence demo: unknown (round "nope"|store "zookeeper")[^\n]*\n$/,
      )
    }
  })

  it('with Redis on a closed port: one line on stderr, exit 1, no worker started', async () => {
    const port = await closedPort()
    const result = await runDemo(['--store', 'redis', '--redis-url', `redis://127.0.0.1:${port}`])
    expect(result.stderr).toMatch(
      new RegExp(
        `^pgfence demo: Redis at 127\\.0\\.0\\.1:${port} does not answer \\(connect ECONNREFUSED [^\\n]*\\); start it or pass --redis-url\\n$`,
      ),
    )
    expect(result.code).toBe(1)
    expect(result.elapsedMs).toBeLessThan(15_000)
  })

  it('with Redis gone while a worker is frozen: one line, exit 1, every worker killed', async () => {
    const relay = await startFreezableProxy(new URL(redisUrl()))
    try {
      const before = await demoDatabases()
      let cutAt: number | undefined
      const args = ['--store', 'redis', '--redis-url', relay.url, '--database-url', db.url]
      const result = await runDemo(args, (line) => {
        // Worker 1 holds the lease and is about to be frozen; worker 2 will find Redis gone.
        if (cutAt === undefined && /worker 1 takes the lease/.test(line)) {
          cutAt = performance.now()
          void relay.close()
        }
      })
      expect(cutAt).toBeDefined()
      expect(result.stderr).toMatch(/^pgfence demo: a demo worker failed: [^\n]+\n$/)
      expect(result.code).toBe(1)
      // The workers share the demo's stdout: it closed, so none is left, frozen or not.
      expect(performance.now() - cutAt!).toBeLessThan(10_000)
      expect([...(await demoDatabases())].filter((name) => !before.has(name))).toEqual([])
    } finally {
      await relay.close()
    }
  })

  it('on SIGTERM while a worker is frozen: one line, exit 1, every worker killed', async () => {
    const before = await demoDatabases()
    let signalledAt: number | undefined
    const result = await runDemo(['--database-url', db.url, '--rounds', 'fenced'], (line, demo) => {
      if (signalledAt === undefined && /frozen \(SIGSTOP\)/.test(line)) {
        signalledAt = performance.now()
        demo.kill('SIGTERM')
      }
    })
    expect(signalledAt).toBeDefined()
    expect(result.stderr).toBe('pgfence demo: interrupted by SIGTERM\n')
    expect(result.code).toBe(1)
    expect(performance.now() - signalledAt!).toBeLessThan(10_000)
    expect([...(await demoDatabases())].filter((name) => !before.has(name))).toEqual([])
  })

  it('on SIGTERM during the redis-failover round: one line, exit 1, no Redis server left', async () => {
    // The demo's temp dirs, and so its Redis servers' working directories, are under `dir`.
    const dir = mkdtempSync(join(tmpdir(), 'pgfence-demo-tmp-'))
    try {
      let signalled = false
      const result = await runDemo(
        ['--database-url', db.url, '--rounds', 'redis-failover'],
        (line, demo) => {
          if (!signalled && /worker 1 takes the lease/.test(line)) {
            signalled = true
            demo.kill('SIGTERM')
          }
        },
        { ...process.env, TMPDIR: dir },
      )
      expect(signalled).toBe(true)
      expect(result.stderr).toBe('pgfence demo: interrupted by SIGTERM\n')
      expect(result.code).toBe(1)
      expect(processesIn(dir)).toEqual([])
      expect(readdirSync(dir)).toEqual([])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

/** The processes whose working directory is under `dir` (Redis works in its --dir). */
function processesIn(dir: string): string[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return readlinkSync(`/proc/${pid}/cwd`).startsWith(dir)
      } catch {
        return false // gone meanwhile, or not ours to look at
      }
    })
}
