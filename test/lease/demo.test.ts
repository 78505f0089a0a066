import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { RoundResult } from '../../src/cli/demo.js'
import {
  adminQuery,
  createTestDatabase,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { startFreezableProxy } from '../../src/dev/freezable-proxy.js'
import { redisUrl } from './support/lease-fixtures.js'
import { freePort } from './support/throwaway-cluster.js'

const run = promisify(execFile)

const expectedRounds = [
  { name: 'naive', finalValue: 'A', corrupted: true, staleWriteCode: null },
  { name: 'lease', finalValue: 'A', corrupted: true, staleWriteCode: null },
  { name: 'fenced', finalValue: 'B', corrupted: false, staleWriteCode: 'PF409' },
  { name: 'split-brain', finalValue: 'B (ledger: B)', corrupted: false, staleWriteCode: 'PF409' },
]

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
): Promise<DemoRun> {
  const startedAt = performance.now()
  const demo = spawn(process.execPath, [inject('cliPath'), 'demo', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
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

describe('pgfence demo', () => {
  it('--json: the naive lock and the lease alone corrupt invoice 99, pgfence refuses the late writes', async () => {
    const { stdout } = await run(
      process.execPath,
      [inject('cliPath'), 'demo', '--json', '--redis-url', redisUrl()],
      { timeout: 60_000 },
    )
    const { rounds } = JSON.parse(stdout) as { rounds: RoundResult[] }
    expect(rounds).toEqual(expectedRounds)
  })

  it('--database-url: plays in a database of its own on that server, dropped at the end', async () => {
    const before = await demoDatabases()
    const { stdout } = await run(
      process.execPath,
      [inject('cliPath'), 'demo', '--json', '--redis-url', redisUrl(), '--database-url', db.url],
      { timeout: 60_000 },
    )
    expect((JSON.parse(stdout) as { rounds: RoundResult[] }).rounds).toEqual(expectedRounds)
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

  it('with Redis on a closed port: one line on stderr, exit 1, no worker started', async () => {
    const port = await freePort()
    const result = await runDemo(['--redis-url', `redis://127.0.0.1:${port}`])
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
      const result = await runDemo(['--redis-url', relay.url, '--database-url', db.url], (line) => {
        // Worker 1 holds the lock and is about to be frozen; worker 2 will find Redis gone.
        if (cutAt === undefined && /worker 1 takes the lock/.test(line)) {
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
    const result = await runDemo(
      ['--redis-url', redisUrl(), '--database-url', db.url],
      (line, demo) => {
        if (signalledAt === undefined && /frozen \(SIGSTOP\)/.test(line)) {
          signalledAt = performance.now()
          demo.kill('SIGTERM')
        }
      },
    )
    expect(signalledAt).toBeDefined()
    expect(result.stderr).toBe('pgfence demo: interrupted by SIGTERM\n')
    expect(result.code).toBe(1)
    expect(performance.now() - signalledAt!).toBeLessThan(10_000)
    expect([...(await demoDatabases())].filter((name) => !before.has(name))).toEqual([])
  })
})
