import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import pg from 'pg'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { stringify } from 'yaml'
import { parseConfig } from '../../src/config/load.js'
import { installFencing, invoicesSql } from '../fence/support.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { waitFor } from '../e2e/support/wait.js'

const fencing = { tables: [{ name: 'invoices' }] }
let db: TestDatabase
let configDir: string

beforeAll(async () => {
  db = await createTestDatabase('admin_signals')
  configDir = mkdtempSync(join(tmpdir(), 'pgfence-signals-'))
  const setup = new pg.Client({ connectionString: db.url })
  await setup.connect()
  await setup.query(invoicesSql)
  // Not fenced in the database: only a reload names it.
  await setup.query(
    'CREATE TABLE payments (id int PRIMARY KEY, status text, fencing_token bigint NOT NULL DEFAULT 0);' +
      "INSERT INTO payments VALUES (1, 'new', 0)",
  )
  await setup.end()
  await installFencing(db.url, parseConfig({ fencing }).fencing)
})

afterAll(async () => {
  await db?.drop()
  if (configDir) rmSync(configDir, { recursive: true, force: true })
})

interface RunningCli {
  child: ChildProcess
  port: number
  /** Log messages (`msg`) so far. */
  messages: string[]
}

/** Starts `pgfence start` on the config file; resolves once it listens. */
async function startCli(configFile: string): Promise<RunningCli> {
  const child = spawn(process.execPath, [inject('cliPath'), 'start', '--config', configFile], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const messages: string[] = []
  let port = 0
  const listening = new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as { msg: string; port?: number }
      messages.push(entry.msg)
      if (entry.msg === 'pgfence listening' && entry.port) {
        port = entry.port
        resolve()
      }
    })
    child.once('exit', () => reject(new Error('pgfence start exited before listening')))
  })
  await listening
  return { child, port, messages }
}

function writeConfig(file: string, overrides: object): void {
  const url = new URL(db.url)
  const config = {
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: url.hostname, port: Number(url.port) },
    log: { level: 'info' },
    ...overrides,
  }
  writeFileSync(file, stringify(config))
}

async function connect(cli: RunningCli): Promise<pg.Client> {
  const url = new URL(db.url)
  url.port = String(cli.port)
  const client = new pg.Client({ connectionString: url.toString() })
  await client.connect()
  return client
}

/** The first error a client reports (the socket's close follows it as a second one). */
const firstError = (client: pg.Client) =>
  new Promise<Error>((resolve) => client.on('error', resolve))

const messageSeen = (cli: RunningCli, msg: string, count = 1) =>
  waitFor(() => cli.messages.filter((m) => m === msg).length >= count, { what: msg })

test('SIGHUP fences a table for a session opened before; a broken file keeps the old rules', async () => {
  const configFile = join(configDir, 'reload.yaml')
  writeConfig(configFile, {})
  const cli = await startCli(configFile)
  const client = await connect(cli)
  const write = () => client.query("UPDATE payments SET status = 'x' WHERE id = 1")
  try {
    expect(await sqlstateOf(write())).toBe('ok')
    writeConfig(configFile, { fencing: { tables: [{ name: 'payments' }] } })
    cli.child.kill('SIGHUP')
    await messageSeen(cli, 'configuration reloaded')
    expect(await sqlstateOf(write())).toBe('PF428')

    writeConfig(configFile, { fencing: { tables: [{ name: 'payments', colum: 'typo' }] } })
    cli.child.kill('SIGHUP')
    await messageSeen(cli, 'configuration reload refused: the running configuration stays in force')
    expect(await sqlstateOf(write())).toBe('PF428')
  } finally {
    await client.end()
    cli.child.kill('SIGTERM')
    await once(cli.child, 'exit')
  }
})

test.each(['native', 'node'])(
  'SIGTERM (%s relay) closes an idle session at once and a transaction after its COMMIT, then exits 0',
  async (relay) => {
    const configFile = join(configDir, `shutdown-${relay}.yaml`)
    writeConfig(configFile, { relay, limits: { shutdownTimeoutMs: 20_000 } })
    const cli = await startCli(configFile)
    const idle = await connect(cli)
    const busy = await connect(cli)
    const idleError = firstError(idle)
    const busyError = firstError(busy)
    await idle.query('SELECT 1')
    await busy.query('BEGIN')
    await busy.query("UPDATE payments SET status = 'draining' WHERE id = 1")
    const exited = once(cli.child, 'exit')

    const signalled = Date.now()
    cli.child.kill('SIGTERM')
    expect(await sqlstateOf(Promise.reject(await idleError))).toBe('57P01')
    expect(Date.now() - signalled).toBeLessThan(2000)

    expect(await sqlstateOf(busy.query('COMMIT'))).toBe('ok')
    expect(await sqlstateOf(Promise.reject(await busyError))).toBe('57P01')
    const [code, signal] = await exited
    expect({ code, signal }).toEqual({ code: 0, signal: null })
    const check = new pg.Client({ connectionString: db.url })
    await check.connect()
    const { rows } = await check.query('SELECT status FROM payments WHERE id = 1')
    await check.end()
    expect(rows).toEqual([{ status: 'draining' }])
    await idle.end().catch(() => {})
    await busy.end().catch(() => {})
  },
)
