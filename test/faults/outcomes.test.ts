import pg from 'pg'
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { installSql } from '../../src/schema/install.js'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import type { ConfigOverrides } from '../support/proxy.js'
import {
  backendRuns,
  backendsGone,
  connectionError,
  sqlstateOf,
  startFaultStack,
  type FaultStack,
} from './support.js'

const fencing = { tables: [{ name: 'invoices' }] }

let db: TestDatabase
let admin: pg.Client
let stack: FaultStack | undefined

beforeAll(async () => {
  db = await createTestDatabase('faults_outcomes')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query('CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL)')
  await admin.query(installSql(parseConfig({ fencing }).fencing))
  // A COMMIT that takes seconds: a deferred constraint trigger sleeps at commit time.
  await admin.query(`
    CREATE TABLE slow (id int PRIMARY KEY);
    CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql
      AS $$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$;
    CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
    CREATE TABLE quick (id int PRIMARY KEY);`)
})

afterEach(async () => {
  await stack?.close()
  stack = undefined
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
})

async function start(overrides: ConfigOverrides = {}): Promise<FaultStack> {
  stack = await startFaultStack(db, { fencing, ...overrides })
  return stack
}

const rowCount = async (table: string, id: number): Promise<number> =>
  (await admin.query(`SELECT count(*)::int AS n FROM ${table} WHERE id = $1`, [id])).rows[0].n

test('a reset before COMMIT gives an error and no write', async () => {
  await admin.query(`INSERT INTO invoices VALUES (1, 'PENDING')`)
  const { relay, client } = await start()
  const session = await client()
  await session.query('BEGIN')
  await session.query(`UPDATE invoices SET status = 'PAID' WHERE id = 1 /*fencing_token=101*/`)
  const lost = connectionError(session)
  relay.set('reset')
  expect(await lost).toBe('08006')
  await expect(session.query('COMMIT')).rejects.toThrow()
  const { rows } = await admin.query('SELECT status, fencing_token FROM invoices WHERE id = 1')
  expect(rows[0]).toEqual({ status: 'PENDING', fencing_token: '0' })
})

test('shutdown during a slow COMMIT answers 08007, and the backend does not outlive it', async () => {
  const { proxy, client } = await start({ limits: { shutdownTimeoutMs: 300 } })
  const session = await client('pgfence-faults-slow-commit')
  await session.query('BEGIN')
  await session.query('INSERT INTO slow VALUES (1)')
  const commit = sqlstateOf(session.query('COMMIT'))
  await backendRuns(admin, 'pgfence-faults-slow-commit', 'COMMIT')
  await proxy.close()
  // 57P01 would tell the client it rolled back: the commit may have happened, so 08007.
  expect(await commit).toBe('08007')
  await backendsGone(admin, 'pgfence-faults-slow-commit')
  // Cancelled during its deferred trigger, the transaction rolled back; 08007 allows either.
  expect(await rowCount('slow', 1)).toBe(0)
})

test('an upstream reset during a slow COMMIT answers 08007', async () => {
  const { relay, client } = await start()
  const session = await client('pgfence-faults-reset-commit')
  await session.query('BEGIN')
  await session.query('INSERT INTO slow VALUES (2)')
  const commit = sqlstateOf(session.query('COMMIT'))
  await backendRuns(admin, 'pgfence-faults-reset-commit', 'COMMIT')
  relay.set('reset')
  relay.set('pass') // lets the cancel request through
  expect(await commit).toBe('08007')
  await backendsGone(admin, 'pgfence-faults-reset-commit')
})

test('shutdown during a statement inside a transaction answers 57P01, and nothing commits', async () => {
  const { proxy, client } = await start({ limits: { shutdownTimeoutMs: 300 } })
  const session = await client('pgfence-faults-slow-update')
  await session.query('BEGIN')
  await session.query('INSERT INTO quick VALUES (1)')
  const statement = sqlstateOf(session.query('SELECT pg_sleep(5)'))
  await backendRuns(admin, 'pgfence-faults-slow-update', 'SELECT pg_sleep')
  await proxy.close()
  expect(await statement).toBe('57P01')
  await backendsGone(admin, 'pgfence-faults-slow-update')
  expect(await rowCount('quick', 1)).toBe(0)
})

test('a statement outside a transaction block in flight at shutdown answers 08007', async () => {
  const { proxy, client } = await start({ limits: { shutdownTimeoutMs: 300 } })
  const session = await client('pgfence-faults-implicit')
  const statement = sqlstateOf(session.query('INSERT INTO quick SELECT 2 FROM pg_sleep(5)'))
  await backendRuns(admin, 'pgfence-faults-implicit', 'INSERT INTO quick')
  await proxy.close()
  expect(await statement).toBe('08007')
  await backendsGone(admin, 'pgfence-faults-implicit')
})
