import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest'
import { run as migrate } from '../../src/cli/migrate.js'
import { parseConfig } from '../../src/config/load.js'
import { startProxy, type RunningProxy } from '../../src/proxy/proxy-server.js'
import { createRewriter } from '../../src/rewrite/rewriter.js'
import { FencingRewriter } from '../../src/rewrite/rewriter.js'
import { resolveTables } from '../../src/schema/resolve-tables.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { relayUnderTest } from '../support/proxy.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { capturingLogger } from '../fencing-e2e/support.js'

const fencingOf = (tables: { name: string; column?: string }[], resources: string[] = []) =>
  parseConfig({
    fencing: {
      tables,
      resources: resources.length ? [{ tables: resources, resource: 'r' }] : [],
    },
  }).fencing

describe('the rewriter compares the parsed name with the exact configured spelling', () => {
  // The row fence is the table's trigger; the rewriter's match shows in what it refuses, such
  // as a write to the fence column.
  const fenced = (rewriter: FencingRewriter, table: string, column = 'fencing_token') =>
    rewriter.rewriteQuery(`UPDATE ${table} SET ${column} = 1`)?.includes('PF501') ?? false

  test('a mixed-case name fences the quoted table an ORM creates, not its folded namesake', async () => {
    const rewriter = await createRewriter(fencingOf([{ name: 'Invoices' }, { name: 'app.Users' }]))
    expect(fenced(rewriter, '"Invoices"')).toBe(true)
    expect(fenced(rewriter, 'public."Invoices"')).toBe(true)
    expect(fenced(rewriter, 'app."Users"')).toBe(true)
    // Unquoted SQL folds to lower case: another table.
    expect(fenced(rewriter, 'Invoices')).toBe(false)
    expect(fenced(rewriter, 'app.users')).toBe(false)
  })

  test('lower-case and quoted names keep working as before', async () => {
    const rewriter = await createRewriter(
      fencingOf([{ name: 'invoices' }, { name: '"odd.name"', column: 'Fence' }]),
    )
    expect(fenced(rewriter, 'INVOICES')).toBe(true)
    expect(fenced(rewriter, '"odd.name"', '"Fence"')).toBe(true)
    expect(fenced(rewriter, '"odd.name"', 'fence')).toBe(false)
  })

  test('with an unresolved name, writes to its look-alikes are refused (PF501)', () => {
    const fencing = fencingOf([{ name: 'Invoices' }])
    const unresolved = [{ text: 'Invoices', schema: undefined, name: 'Invoices' }]
    const rewriter = new FencingRewriter(fencing, 16, unresolved)
    expect(rewriter.rewriteQuery('UPDATE invoices SET a = 1')).toMatch(
      /^SELECT pgfence\.refuse\('PF501', 'table is not fenced because its configured name/,
    )
    expect(rewriter.rewriteQuery('DELETE FROM public.INVOICES')).toMatch(/pgfence\.refuse/)
    expect(rewriter.rewriteQuery('SELECT * FROM invoices')).toBeNull()
    expect(rewriter.rewriteQuery('UPDATE invoices_old SET a = 1')).toBeNull()
  })
})

describe('in a database', () => {
  let db: TestDatabase
  let admin: pg.Client
  let dir: string

  beforeAll(async () => {
    db = await createTestDatabase('table_names')
    admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    await admin.query(`
      CREATE SCHEMA other;
      CREATE TABLE "Invoices" (id int PRIMARY KEY, status text);
      CREATE TABLE orders (id int PRIMARY KEY, status text);
      CREATE TABLE dup (id int); CREATE TABLE other.dup (id int);
      CREATE TABLE other.hidden (id int);
      CREATE VIEW order_view AS SELECT * FROM orders;
      CREATE TABLE events (id int, d date) PARTITION BY RANGE (d);
      CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
      CREATE TABLE logs (id int, d date) PARTITION BY RANGE (d);
      CREATE TABLE logs_2026 PARTITION OF logs FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');`)
    dir = mkdtempSync(join(tmpdir(), 'pgfence-names-'))
  })

  afterAll(async () => {
    await admin?.end()
    await db?.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  test('each name resolves as PostgreSQL would, or says what to write', async () => {
    const fencing = fencingOf(
      [
        { name: 'Invoices' },
        { name: 'Orders' },
        { name: 'dup' },
        { name: 'hidden' },
        { name: 'nothing' },
        { name: 'order_view' },
        { name: 'logs_2026' },
      ],
      ['other.DUP'],
    )
    const { tables, problems } = await resolveTables(admin, fencing)
    expect(tables.map((t) => `${t.resolvedSchema}.${t.name}`)).toEqual(['public.Invoices'])
    expect(problems.map((p) => [p.text, p.unresolved, p.message])).toEqual([
      [
        'Orders',
        true,
        'fenced table "Orders" does not exist; names are case-sensitive, and the database has public.orders: write that name (e.g. name: public.orders)',
      ],
      [
        'dup',
        false,
        'fenced table "dup" names tables in several schemas (other.dup, public.dup): write the schema, e.g. name: other.dup',
      ],
      [
        'hidden',
        false,
        'fenced table "hidden" is not on the search_path: write the schema, name: other.hidden',
      ],
      ['nothing', true, 'fenced table "nothing" does not exist'],
      [
        'order_view',
        false,
        'fenced table "order_view" is not a table (public.order_view): fence the table itself',
      ],
      [
        'other.DUP',
        true,
        'fenced table "other.DUP" does not exist; names are case-sensitive, and the database has other.dup: write that name (e.g. name: other.dup)',
      ],
      [
        'logs_2026',
        false,
        'fenced table "logs_2026" is a partition of public.logs and a partition inherits its columns: fence public.logs too, or add column fencing_token to it',
      ],
    ])
  })

  /** Runs migrate with a config of these table names; its exit code and stderr. */
  async function migrateWith(names: string[]): Promise<{ code: number; err: string }> {
    const file = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`)
    writeFileSync(file, `fencing:\n  tables:\n${names.map((n) => `    - name: '${n}'\n`).join('')}`)
    let err = ''
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      err += String(chunk)
      return true
    })
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true)
    try {
      return { code: await migrate(['--config', file, '--database-url', db.url]), err }
    } finally {
      stderr.mockRestore()
      stdout.mockRestore()
    }
  }

  test('migrate refuses a name that does not resolve, before changing anything', async () => {
    const run = await migrateWith(['Invoices', 'Orders'])
    expect(run.code).toBe(1)
    expect(run.err).toContain('write that name (e.g. name: public.orders)')
    expect(run.err).toContain('nothing was changed')
    const schema = await admin.query("SELECT 1 FROM pg_namespace WHERE nspname = 'pgfence'")
    expect(schema.rowCount).toBe(0)
  })

  test('migrate fences "Invoices" and a partitioned table with its partition', async () => {
    expect(await migrateWith(['Invoices', 'events', 'events_2026'])).toEqual({ code: 0, err: '' })
    const columns = await admin.query(`
      SELECT table_name FROM information_schema.columns
       WHERE column_name = 'fencing_token' ORDER BY table_name`)
    expect(columns.rows.map((r) => r.table_name)).toEqual(['Invoices', 'events', 'events_2026'])
  })

  // Pooled sessions are checked once per database (on a lent connection), as without pooling.
  describe.each(['none', 'session', 'transaction'] as const)(
    'through the proxy, pool.mode %s',
    (mode) => {
      let proxy: RunningProxy
      const logs: Record<string, unknown>[] = []
      const url = () => {
        const u = new URL(db.url)
        u.port = String(proxy.port)
        u.hostname = proxy.host
        if (mode !== 'none') u.password = POOL_PASSWORD
        return u.toString()
      }

      beforeAll(async () => {
        const pooling = mode === 'none' ? {} : { pool: { mode }, auth: { file: writeUserlist() } }
        const config = parseConfig({
          ...pooling,
          listen: { host: '127.0.0.1', port: 0 },
          upstream: { host: db.host, port: db.port, tls: 'disable' },
          fencing: { tables: [{ name: 'Invoices' }, { name: 'Orders' }] },
          relay: relayUnderTest(),
        })
        proxy = await startProxy(config, { logger: capturingLogger(logs) })
      })

      afterAll(async () => proxy?.close())

      test('an unresolved name is logged at error once, and writes to its look-alike are refused', async () => {
        for (let i = 0; i < 2; i++) {
          const client = new pg.Client({ connectionString: url() })
          await client.connect()
          try {
            expect(await sqlstateOf(client.query("UPDATE orders SET status = 'x'"))).toBe('PF501')
            expect(await sqlstateOf(client.query('SELECT * FROM orders'))).toBe('ok')
            const id = ['none', 'session', 'transaction'].indexOf(mode) * 10 + i
            const insert = `INSERT INTO "Invoices" (id) VALUES (${id})`
            expect(await sqlstateOf(client.query(insert))).toBe('PF428')
            await client.query("SET app.fencing_token = '5'")
            expect(await sqlstateOf(client.query(insert))).toBe('ok')
          } finally {
            await client.end()
          }
        }
        const errors = logs.filter((r) => r.level === 50)
        expect(errors).toEqual([
          expect.objectContaining({
            database: db.name,
            table: 'Orders',
            msg: expect.stringContaining('the database has public.orders'),
          }),
        ])
      })
    },
  )
})
