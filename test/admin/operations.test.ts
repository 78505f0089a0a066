import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { stringify } from 'yaml'
import { parseConfig } from '../../src/config/load.js'
import { installFencing, invoicesSql, seedInvoice99 } from '../fence/support.js'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { closedPort } from '../e2e/support/ports.js'

const fencing = { tables: [{ name: 'invoices' }] }
let db: TestDatabase
let workDir: string

beforeAll(async () => {
  db = await createTestDatabase('admin_operations')
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-operations-'))
  const setup = new pg.Client({ connectionString: db.url })
  await setup.connect()
  await setup.query(invoicesSql)
  // Not fenced in the database: only a reload names it.
  await setup.query(unfencedSql)
  await setup.end()
  await installFencing(db.url, parseConfig({ fencing }).fencing)
})

afterAll(async () => {
  await db?.drop()
  if (workDir) rmSync(workDir, { recursive: true, force: true })
})

const unfencedSql = `
CREATE TABLE payments (id int PRIMARY KEY, status text, fencing_token bigint NOT NULL DEFAULT 0);
INSERT INTO payments VALUES (1, 'new', 0);
`

/** Resets invoice 99 (row 99, token 100) under pgfence.maintenance. */
async function seed(): Promise<void> {
  const client = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await client.connect()
  await client.query(seedInvoice99)
  await client.end()
}

/** A proxy with the admin endpoint on a free port. */
function startOperatedProxy(
  overrides: ConfigOverrides = {},
  upstreamUrl = db.url,
  configFile?: string,
) {
  return startTestProxy(
    { fencing, admin: { listen: { port: 0 }, users: ['postgres'] }, ...overrides },
    upstreamUrl,
    configFile ? { configFile } : {},
  )
}

async function scrape(
  proxy: TestProxy,
  path = '/metrics',
): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://127.0.0.1:${proxy.adminPort}${path}`)
  return { status: response.status, body: await response.text() }
}

/** The value of one series line, exactly as labelled. */
function series(body: string, name: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.slice(name.length + 1))
}

async function query(url: string, sql: string): Promise<unknown> {
  const client = new pg.Client({ connectionString: url })
  client.on('error', () => {})
  await client.connect()
  try {
    return await client.query(sql)
  } finally {
    await client.end()
  }
}

function psql(url: string, args: string[]) {
  return runCommand(pgBin('psql'), ['--no-psqlrc', '-X', '-d', url, ...args], { timeoutMs: 10_000 })
}

describe.each(['native', 'node'] as const)('metrics with the %s relay', (relay) => {
  test('rejections are counted exactly by code and table', async () => {
    const proxy = await startOperatedProxy({ relay })
    const client = new pg.Client({ connectionString: proxy.url() })
    try {
      await seed()
      await client.connect()
      const write = (sql: string) => sqlstateOf(client.query(sql))
      for (let i = 0; i < 3; i++) {
        expect(await write("UPDATE invoices SET status = 'x' WHERE id = 99")).toBe('PF428')
      }
      for (let i = 0; i < 2; i++) {
        const stale = "/* fencing_token=7 */ UPDATE invoices SET status = 'x' WHERE id = 99"
        expect(await write(stale)).toBe('PF409')
      }
      // node-postgres settles a failed query before its ReadyForQuery: this one waits for all.
      await client.query('SELECT 1')
      const { status, body } = await scrape(proxy)
      expect(status).toBe(200)
      expect(
        series(body, 'pgfence_fencing_rejections_total{code="PF428",table="public.invoices"}'),
      ).toBe(3)
      expect(
        series(body, 'pgfence_fencing_rejections_total{code="PF409",table="public.invoices"}'),
      ).toBe(2)
      // One transaction per statement outside a transaction block, failed or not.
      expect(series(body, 'pgfence_transactions_total')).toBe(6)
      expect(series(body, 'pgfence_rewrite_cache_lookups_total{result="hit"}')).toBeGreaterThan(0)
      expect(body).toContain('pgfence_upstream_connect_failures_total 0')
      expect(body).toContain('process_cpu_seconds_total')
    } finally {
      await client.end()
      await proxy.close()
    }
  })
  test("a multi-statement query's rejection is counted under its table", async () => {
    const proxy = await startOperatedProxy({ relay })
    const client = new pg.Client({ connectionString: proxy.url() })
    try {
      await seed()
      await client.connect()
      const update = "UPDATE invoices SET status = 'x' WHERE id = 99"
      const write = (sql: string) => sqlstateOf(client.query(sql))
      // No token; a stale comment token on one of the two statements; a stale session token.
      expect(await write(`${update}; SELECT 1`)).toBe('PF428')
      expect(await write(`/* fencing_token=7 */ ${update}; SELECT 1`)).toBe('PF501')
      expect(await write(`SET app.fencing_token = 7; ${update}`)).toBe('PF409')
      await client.query('SELECT 1')
      const { body } = await scrape(proxy)
      for (const code of ['PF428', 'PF501', 'PF409']) {
        const name = `pgfence_fencing_rejections_total{code="${code}",table="public.invoices"}`
        expect(series(body, name)).toBe(1)
      }
      expect(body).not.toContain('table="."')
    } finally {
      await client.end()
      await proxy.close()
    }
  })
})

test('client connections, server connections and native sessions are read at scrape time', async () => {
  const proxy = await startOperatedProxy()
  const idle = new pg.Client({ connectionString: proxy.url() })
  const busy = new pg.Client({ connectionString: proxy.url() })
  try {
    await idle.connect()
    await busy.connect()
    await idle.query('SELECT 1')
    await busy.query('BEGIN')
    const { body } = await scrape(proxy)
    expect(series(body, 'pgfence_client_connections{state="idle"}')).toBe(1)
    expect(series(body, 'pgfence_client_connections{state="in_transaction"}')).toBe(1)
    expect(series(body, 'pgfence_server_connections{state="active"}')).toBe(2)
    expect(series(body, 'pgfence_native_relay_sessions')).toBe(proxy.nativeSessionCount())
    // One transaction each so far: the SELECT (BEGIN leaves a transaction open).
    expect(series(body, 'pgfence_transactions_total')).toBe(1)
  } finally {
    await idle.end()
    await busy.end()
    await proxy.close()
  }
})

describe('probes', () => {
  test('/healthz and /readyz are 200 with the upstream up', async () => {
    const proxy = await startOperatedProxy()
    try {
      expect((await scrape(proxy, '/healthz')).status).toBe(200)
      expect((await scrape(proxy, '/readyz')).status).toBe(200)
    } finally {
      await proxy.close()
    }
  })

  test('/readyz is 503 with the upstream down, /healthz still 200; failures are counted', async () => {
    const refusing = await closedPort()
    const proxy = await startOperatedProxy({}, `postgres://postgres@127.0.0.1:${refusing}/postgres`)
    try {
      expect((await scrape(proxy, '/healthz')).status).toBe(200)
      expect((await scrape(proxy, '/readyz')).status).toBe(503)
      expect(await sqlstateOf(query(proxy.url(), 'SELECT 1'))).toBe('08006')
      expect(series((await scrape(proxy)).body, 'pgfence_upstream_connect_failures_total')).toBe(1)
    } finally {
      await proxy.close()
    }
  })
})

describe('admin console', () => {
  test('psql shows SHOW STATS and SHOW FENCING as tables', async () => {
    const proxy = await startOperatedProxy()
    try {
      await seed()
      await sqlstateOf(query(proxy.url(), "UPDATE invoices SET status = 'x' WHERE id = 99"))
      const stats = await psql(proxy.url(undefined, 'pgfence'), ['-c', 'SHOW STATS'])
      expect(stats.stderr).toBe('')
      expect(stats.stdout).toMatch(/client_connections.*\|.*transactions.*\|.*fencing_rejections/)
      expect(stats.stdout).toContain('(1 row)')
      const fencingTable = await psql(proxy.url(undefined, 'pgfence'), [
        '-At',
        '-F',
        ',',
        '-c',
        'show fencing;',
      ])
      expect(fencingTable.stdout.trim()).toBe('table,invoices,invoices,fencing_token,true,0,1,0,0')
      const clients = await psql(proxy.url(undefined, 'pgfence'), ['-At', '-c', 'SHOW CLIENTS'])
      expect(clients.code).toBe(0)
      const config = await psql(proxy.url(undefined, 'pgfence'), [
        '-At',
        '-F',
        '=',
        '-c',
        'SHOW CONFIG',
      ])
      expect(config.stdout).toContain('fencing.tables=[{"name":"invoices"')
      const unknown = await psql(proxy.url(undefined, 'pgfence'), ['-c', 'SELECT 1'])
      expect(unknown.stderr).toContain('unrecognized admin console command')
    } finally {
      await proxy.close()
    }
  })

  test('SHOW FENCING adds up to the fencing_rejections of SHOW STATS', async () => {
    const resource = `ops_${process.pid}`
    const proxy = await startOperatedProxy({
      fencing: { ...fencing, resources: [{ tables: ['payments'], resource }] },
    })
    const client = new pg.Client({ connectionString: proxy.url() })
    try {
      await seed()
      await query(db.url, `SELECT pgfence.raise_fence('${resource}', 50)`)
      await client.connect()
      const write = (sql: string) => sqlstateOf(client.query(sql))
      const invoice = "UPDATE invoices SET status = 'x' WHERE id = 99"
      const payment = "UPDATE payments SET status = 'y' WHERE id = 1"
      // Row fences, the resource fence, and one raised outside any table.
      expect(await write(invoice)).toBe('PF428')
      expect(await write(`/* fencing_token=7 */ ${invoice}`)).toBe('PF409')
      expect(await write(`/* fencing_token=7 */ ${invoice}; SELECT 1`)).toBe('PF501')
      expect(await write(payment)).toBe('PF428')
      expect(await write(`/* fencing_token=10 */ ${payment}`)).toBe('PF409')
      expect(await write(`SELECT pgfence.raise_fence('${resource}', NULL)`)).toBe('PF428')
      await client.query('SELECT 1')
      const consoleUrl = proxy.url(undefined, 'pgfence')
      const show = async (subject: string) =>
        ((await query(consoleUrl, `SHOW ${subject}`)) as pg.QueryResult).rows as Record<
          string,
          string | null
        >[]
      const codes = ['pf409', 'pf428', 'pf400', 'pf501']
      const fencingRows = (await show('FENCING')).map((row) => [
        row.kind,
        row.tables,
        ...codes.map((code) => Number(row[code])),
      ])
      expect(fencingRows).toEqual([
        ['table', 'invoices', 1, 1, 0, 1],
        ['resource', 'payments', 1, 1, 0, 0],
        ['other', '(no table)', 0, 1, 0, 0],
      ])
      const counted = (await show('FENCING')).flatMap((row) =>
        codes.map((code) => Number(row[code])),
      )
      const shown = counted.reduce((sum, count) => sum + count, 0)
      const [stats] = await show('STATS')
      expect(Number(stats!.fencing_rejections)).toBe(shown)
      expect(shown).toBe(6)
    } finally {
      await client.end()
      await proxy.close()
    }
  })

  test('a user not in admin.users gets 42501, an unknown role 28000', async () => {
    const proxy = await startOperatedProxy({ admin: { users: ['someone_else'] } })
    try {
      expect(await sqlstateOf(query(proxy.url(undefined, 'pgfence'), 'SHOW STATS'))).toBe('42501')
      expect(
        await sqlstateOf(query(proxy.url('no_such_role_pgfence', 'pgfence'), 'SHOW STATS')),
      ).toBe('28000')
    } finally {
      await proxy.close()
    }
  })

  test('RELOAD applies a new fenced table; a broken file is refused and the old rules stay', async () => {
    const configFile = join(workDir, 'reload.yaml')
    const writeConfig = (content: object) =>
      writeFileSync(
        configFile,
        stringify({ log: { level: 'silent' }, admin: { users: ['postgres'] }, ...content }),
      )
    const proxy = await startOperatedProxy({ fencing: { tables: [] } }, db.url, configFile)
    const before = new pg.Client({ connectionString: proxy.url() })
    try {
      await before.connect()
      await before.query("UPDATE payments SET status = 'free' WHERE id = 1")
      writeConfig({ fencing: { tables: [{ name: 'payments' }] } })
      expect((await psql(proxy.url(undefined, 'pgfence'), ['-c', 'RELOAD'])).stdout).toContain(
        'RELOAD',
      )
      const write = () => before.query("UPDATE payments SET status = 'x' WHERE id = 1")
      expect(await sqlstateOf(write())).toBe('PF428')
      writeConfig({ fencing: { tables: [{ name: 'payments', unknownKey: 1 }] } })
      const broken = await psql(proxy.url(undefined, 'pgfence'), ['-c', 'RELOAD'])
      expect(broken.stderr).toContain('unknownKey')
      expect(await sqlstateOf(write())).toBe('PF428')
    } finally {
      await before.end()
      await proxy.close()
    }
  })
})

test('a reload arms the idle-in-transaction timeout for sessions already open', async () => {
  const configFile = join(workDir, 'timeouts.yaml')
  const writeConfig = (limits: object) =>
    writeFileSync(configFile, stringify({ log: { level: 'silent' }, limits }))
  writeConfig({})
  const proxy = await startOperatedProxy({}, db.url, configFile)
  const before = new pg.Client({ connectionString: proxy.url() })
  const cut = new Promise<string>((resolve) =>
    before.on('error', (err) => resolve((err as Error & { code: string }).code)),
  )
  try {
    await before.connect()
    writeConfig({ idleTransactionTimeoutMs: 300 })
    await proxy.reload()
    await before.query('BEGIN')
    expect(await cut).toBe('25P03')
  } finally {
    await before.end().catch(() => {})
    await proxy.close()
  }
})

test('psql connects over the Unix socket', async () => {
  const proxy = await startOperatedProxy({ listen: { unixSocketDir: workDir } })
  const socketPath = join(workDir, `.s.PGSQL.${proxy.port}`)
  try {
    expect(statSync(socketPath).mode & 0o777).toBe(0o777)
    const result = await runCommand(pgBin('psql'), [
      '--no-psqlrc',
      '-X',
      '-At',
      '-h',
      workDir,
      '-p',
      String(proxy.port),
      '-U',
      'postgres',
      '-d',
      db.name,
      '-c',
      "SELECT 'over the socket'",
    ])
    expect(result.stdout.trim()).toBe('over the socket')
  } finally {
    await proxy.close()
  }
  expect(() => statSync(socketPath)).toThrow()
})
