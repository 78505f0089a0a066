import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest'
import { run as migrate } from '../../src/cli/migrate.js'
import { parseConfig } from '../../src/config/load.js'
import { startProxy, type RunningProxy } from '../../src/proxy/proxy-server.js'
import { capturingLogger } from '../fencing-e2e/support.js'
import {
  adminQuery,
  createTestDatabase,
  maintenanceSession,
  type TestDatabase,
} from '../support/database.js'
import { relayUnderTest } from '../support/proxy.js'
import { sqlstateOf } from './support.js'

// Tables that join a fenced table's tree after `pgfence migrate` ran.
const schemaSql = `
CREATE TABLE items (id int, region text NOT NULL DEFAULT 'eu', status text NOT NULL);
CREATE TABLE orders (id int, region text NOT NULL, status text NOT NULL) PARTITION BY LIST (region);
CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN ('eu');
CREATE TABLE payouts (id int, amount int);
`
const laterSql = `
CREATE TABLE items_late () INHERITS (items);
CREATE TABLE items_adopted (id int, region text NOT NULL DEFAULT 'eu', status text NOT NULL,
  fencing_token bigint NOT NULL DEFAULT 0);
ALTER TABLE items_adopted INHERIT items;
CREATE TABLE orders_us PARTITION OF orders FOR VALUES IN ('us');
CREATE TABLE orders_ap (LIKE orders);
ALTER TABLE orders ATTACH PARTITION orders_ap FOR VALUES IN ('ap');
CREATE TABLE orders_sa PARTITION OF orders FOR VALUES IN ('sa') PARTITION BY LIST (status);
CREATE TABLE orders_sa_new PARTITION OF orders_sa DEFAULT;
CREATE TABLE payouts_late () INHERITS (payouts);
`
const later = [
  { table: 'items_late', region: 'eu' },
  { table: 'items_adopted', region: 'eu' },
  { table: 'orders_us', region: 'us' },
  { table: 'orders_ap', region: 'ap' },
  { table: 'orders_sa_new', region: 'sa' },
]

// payouts: a member table of a fixed resource, gated by a statement trigger.
const fencing = {
  tables: [{ name: 'items' }, { name: 'orders' }],
  resources: [{ tables: ['payouts'], resource: 'payments' }],
}
const payoutsLate = 'INSERT INTO payouts_late (id, amount) VALUES (1, 1)'

let dir: string
let configFile: string

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pgfence-descendants-'))
  configFile = join(dir, 'pgfence.yaml')
  writeFileSync(configFile, `fencing:\n  ${JSON.stringify(fencing)}\n`)
})

afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Runs `pgfence migrate` (or its dry run); its exit code, stdout and stderr. */
async function runMigrate(url: string, ...flags: string[]) {
  let out = ''
  let err = ''
  const stdout = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out += String(chunk)
    return true
  })
  const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    err += String(chunk)
    return true
  })
  try {
    const code = await migrate(['--config', configFile, '--database-url', url, ...flags])
    return { code, out, err }
  } finally {
    stdout.mockRestore()
    stderr.mockRestore()
  }
}

/** A database with the schema, migrated by `role`'s URL, then the later tables created. */
async function preparedDatabase(label: string, owner?: string) {
  const db = await createTestDatabase(label)
  if (owner) await adminQuery(`ALTER DATABASE ${db.name} OWNER TO ${owner}`)
  const url = new URL(db.url)
  if (owner) url.username = owner
  const ownerUrl = url.toString()
  const admin = new pg.Client({ connectionString: ownerUrl, ...maintenanceSession })
  await admin.connect()
  await admin.query(schemaSql)
  const migrated = await runMigrate(ownerUrl)
  await admin.query(laterSql)
  for (const { table, region } of later) {
    await admin.query(
      `INSERT INTO ${table} (id, region, status, fencing_token) VALUES (99, $1, 'PENDING', 100)`,
      [region],
    )
  }
  return { db, admin, ownerUrl, migrated }
}

const row99 = async (client: pg.Client, table: string) =>
  (await client.query(`SELECT status, fencing_token FROM ${table} WHERE id = 99`)).rows[0]

describe('with the event trigger (migrated by a superuser)', () => {
  let db: TestDatabase
  let admin: pg.Client
  let direct: pg.Client
  let migrated: Awaited<ReturnType<typeof runMigrate>>

  beforeAll(async () => {
    ;({ db, admin, migrated } = await preparedDatabase('fence_descendants'))
    direct = new pg.Client({ connectionString: db.url })
    await direct.connect()
  })

  afterAll(async () => {
    await direct?.end()
    await admin?.end()
    await db?.drop()
  })

  test('migrate installs it without a warning, idempotently, and the dry run shows it', async () => {
    expect(migrated).toMatchObject({ code: 0, err: '' })
    expect(await runMigrate(db.url)).toMatchObject({ code: 0, err: '' })
    const dry = await runMigrate(db.url, '--dry-run')
    expect(dry.out).toContain('CREATE EVENT TRIGGER pgfence_fence_descendants ON ddl_command_end')
    const triggers = await admin.query(
      "SELECT evtenabled FROM pg_event_trigger WHERE evtname = 'pgfence_fence_descendants'",
    )
    expect(triggers.rows).toEqual([{ evtenabled: 'A' }])
  })

  test('no descendant is left unfenced or ungated', async () => {
    expect((await admin.query('SELECT * FROM pgfence.unfenced_descendants')).rows).toEqual([])
    await direct.query('RESET ALL')
    expect(await sqlstateOf(direct.query(payoutsLate))).toBe('PF428')
    await direct.query('SET app.fencing_token = 7')
    expect(await sqlstateOf(direct.query(payoutsLate))).toBe('ok')
    const fence = await admin.query('SELECT resource, token::text FROM pgfence.resource_fences')
    expect(fence.rows).toEqual([{ resource: 'payments', token: '7' }])
  })

  test.each(later)('$table: stale, missing and fresh tokens on a direct connection', async (t) => {
    await direct.query('RESET ALL')
    const update = `UPDATE ${t.table} SET status = 'LATE' WHERE id = 99`
    expect(await sqlstateOf(direct.query(update))).toBe('PF428')
    await direct.query('SET app.fencing_token = 50')
    expect(await sqlstateOf(direct.query(update))).toBe('PF409')
    expect(await sqlstateOf(direct.query(`DELETE FROM ${t.table}`))).toBe('PF409')
    expect(await sqlstateOf(direct.query(`TRUNCATE ${t.table}`))).toBe('PF501')
    expect(await row99(admin, t.table)).toEqual({ status: 'PENDING', fencing_token: '100' })
    await direct.query('SET app.fencing_token = 101')
    expect(await sqlstateOf(direct.query(update))).toBe('ok')
    expect(await row99(admin, t.table)).toEqual({ status: 'LATE', fencing_token: '101' })
  })
})

describe('without the event trigger (migrated by a table owner)', () => {
  const owner = `pgfence_descendants_owner_${randomBytes(4).toString('hex')}`
  let db: TestDatabase
  let admin: pg.Client
  let migrated: Awaited<ReturnType<typeof runMigrate>>
  let proxy: RunningProxy
  let client: pg.Client
  const logs: Record<string, unknown>[] = []

  beforeAll(async () => {
    await adminQuery(`CREATE ROLE ${owner} LOGIN; GRANT pgfence_maintenance TO ${owner}`)
    ;({ db, admin, migrated } = await preparedDatabase('fence_descendants_owner', owner))
    const config = parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      upstream: { host: db.host, port: db.port, tls: 'disable' },
      fencing,
      relay: relayUnderTest(),
    })
    proxy = await startProxy(config, { logger: capturingLogger(logs) })
    const url = new URL(db.url)
    url.hostname = proxy.host
    url.port = String(proxy.port)
    client = new pg.Client({ connectionString: url.toString() })
    await client.connect()
  })

  afterAll(async () => {
    await client?.end()
    await proxy?.close()
    await admin?.end()
    await db?.drop()
    await adminQuery(`DROP ROLE IF EXISTS ${owner}`)
  })

  test('migrate says it could not install it, and what to do', () => {
    expect(migrated.code).toBe(0)
    expect(migrated.err).toContain(
      'pgfence migrate: warning: cannot create event trigger pgfence_fence_descendants',
    )
    expect(migrated.err).toContain('hint: run pgfence migrate as a superuser once')
  })

  test('the database lists what is unfenced', async () => {
    const unfenced = await admin.query(
      "SELECT relid::text, fenced::text FROM pgfence.unfenced_descendants WHERE kind = 'row' ORDER BY 1",
    )
    expect(unfenced.rows).toEqual(
      [...later.map((t) => t.table), 'orders_sa'].sort().map((relid) => ({
        relid,
        fenced: relid.startsWith('items') ? 'items' : 'orders',
      })),
    )
  })

  test('a later child of a resource member: pgfence refuses writes to it (PF501)', async () => {
    await client.query('SET app.fencing_token = 7')
    expect(await sqlstateOf(client.query(payoutsLate))).toBe('PF501')
    expect(await sqlstateOf(client.query('INSERT INTO payouts (id, amount) VALUES (2, 2)'))).toBe(
      'ok',
    )
  })

  test.each(later)('$table: pgfence refuses every write to it (PF501)', async (t) => {
    await client.query('SET app.fencing_token = 101')
    const writes = [
      `UPDATE ${t.table} SET status = 'LATE' WHERE id = 99`,
      `/*fencing_token='101'*/ DELETE FROM ${t.table} WHERE id = 99`,
      `INSERT INTO ${t.table} (id, region, status) VALUES (7, '${t.region}', 'NEW')`,
      `TRUNCATE ${t.table}`,
    ]
    for (const write of writes) {
      const err = await client.query(write).then(
        () => null,
        (e: pg.DatabaseError) => e,
      )
      expect(err).toMatchObject({
        code: 'PF501',
        message: expect.stringMatching(
          /of fenced table "(items|orders)" but has no fence triggers/,
        ),
        hint: expect.stringContaining('run pgfence migrate again'),
      })
    }
    expect(await row99(admin, t.table)).toEqual({ status: 'PENDING', fencing_token: '100' })
    expect(await sqlstateOf(client.query(`SELECT * FROM ${t.table}`))).toBe('ok')
  })

  test('the parent of an unfenced child: pgfence refuses its writes, which would reach the child (PF501)', async () => {
    await client.query('SET app.fencing_token = 101')
    const err = await client.query(`UPDATE items SET status = 'LATE' WHERE id = 99`).then(
      () => null,
      (e: pg.DatabaseError) => e,
    )
    expect(err).toMatchObject({
      code: 'PF501',
      message: expect.stringMatching(
        /^table "public"."items" has a child, public\.items_(late|adopted), with no fence triggers$/,
      ),
      hint: expect.stringContaining('run pgfence migrate again'),
    })
    expect(await row99(admin, 'items_late')).toEqual({ status: 'PENDING', fencing_token: '100' })
    expect(await sqlstateOf(client.query('UPDATE orders SET status = status WHERE id = 99'))).toBe(
      'ok',
    )
  })

  test('each is logged at error once, naming the table', () => {
    const errors = logs.filter((r) => r.level === 50)
    expect(errors.map((r) => r.table).sort()).toEqual(
      [...later.map((t) => t.table), 'orders_sa', 'payouts_late', 'items']
        .map((t) => `"public"."${t}"`)
        .sort(),
    )
    expect(errors[0]).toMatchObject({ database: db.name, msg: expect.stringContaining('migrate') })
  })

  test('a superuser rerunning migrate fences them and installs the event trigger', async () => {
    expect(await runMigrate(db.url)).toMatchObject({ code: 0, err: '' })
    expect((await admin.query('SELECT * FROM pgfence.unfenced_descendants')).rows).toEqual([])
    await admin.query('CREATE TABLE items_latest () INHERITS (items)')
    await admin.query('CREATE TABLE payouts_latest () INHERITS (payouts)')
    expect((await admin.query('SELECT * FROM pgfence.unfenced_descendants')).rows).toEqual([])
  })
})
