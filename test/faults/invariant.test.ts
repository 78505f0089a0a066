import { setTimeout as delay } from 'node:timers/promises'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { installSql } from '../../src/schema/install.js'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { startFaultStack, type FaultStack } from './support.js'
import type { FaultMode } from './fault-relay.js'

const fencing = { tables: [{ name: 'invoices' }] }
const ROWS = [1, 2, 3]
const WRITERS = 4
/** Faults run at least this long, and on until enough writes were acknowledged and some failed. */
const RUN_MS = 3000
const ENOUGH_WRITES = 12
const MAX_RUN_MS = 30_000

let db: TestDatabase
let admin: pg.Client
let stack: FaultStack

beforeAll(async () => {
  db = await createTestDatabase('faults_invariant')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query('CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL)')
  await admin.query(installSql(parseConfig({ fencing }).fencing))
  // Every committed write, in the order the row lock let them through.
  await admin.query(`
    CREATE TABLE history (seq bigserial PRIMARY KEY, id int NOT NULL, token bigint NOT NULL);
    CREATE FUNCTION record() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO history (id, token) VALUES (NEW.id, NEW.fencing_token); RETURN NULL; END $$;
    CREATE TRIGGER record AFTER UPDATE ON invoices FOR EACH ROW EXECUTE FUNCTION record();`)
  for (const id of ROWS) await admin.query(`INSERT INTO invoices VALUES (${id}, 'NEW')`)
  stack = await startFaultStack(db, { fencing, upstream: { connectTimeoutMs: 1000 } })
})

afterAll(async () => {
  await stack?.close()
  await admin?.end()
  await db?.drop()
})

interface Write {
  id: number
  token: number
}

test('under resets and delays: every acknowledged write kept, no stale one, tokens never decrease', async () => {
  let nextToken = 100
  const acknowledged: Write[] = []
  let failed = 0
  const started = performance.now()
  const running = () => {
    const elapsed = performance.now() - started
    if (elapsed > MAX_RUN_MS) return false
    return elapsed < RUN_MS || acknowledged.length < ENOUGH_WRITES || failed === 0
  }

  /** One fenced writer: a fresh token per write, half of them in explicit transactions. */
  async function writer(n: number): Promise<void> {
    let client: pg.Client | null = null
    for (let i = 0; running(); i++) {
      try {
        if (!client) {
          client = new pg.Client({ connectionString: stack.proxy.url() })
          client.on('error', () => {})
          await client.connect()
        }
        const write = { id: ROWS[(n + i) % ROWS.length]!, token: ++nextToken }
        const update = `UPDATE invoices SET status = 'w${n}' WHERE id = ${write.id} /*fencing_token=${write.token}*/`
        if (i % 2 === 0) await client.query(update)
        else await client.query(`BEGIN; ${update}; COMMIT`)
        acknowledged.push(write)
      } catch (err) {
        if ((err as { code?: string }).code === 'PF409') continue // a later token got there first
        failed++
        void client?.end().catch(() => {})
        client = null
        await delay(10) // back off while the relay resets new connections
      }
    }
    await client?.end().catch(() => {})
  }

  /** The fault schedule: pass, delay, reset, in turn. */
  async function faults(): Promise<void> {
    const schedule: [FaultMode, number][] = [
      ['pass', 0],
      ['delay', 5],
      ['reset', 0],
      ['pass', 0],
      ['delay', 20],
    ]
    for (let i = 0; running(); i++) {
      const [mode, ms] = schedule[i % schedule.length]!
      stack.relay.set(mode, ms)
      await delay(mode === 'reset' ? 20 : 150)
    }
    stack.relay.set('pass')
  }

  await Promise.all([faults(), ...Array.from({ length: WRITERS }, (_, n) => writer(n))])

  const { rows } = await admin.query<{ id: number; token: string }>(
    'SELECT id, token FROM history ORDER BY seq',
  )
  const committed = new Map<number, number[]>(ROWS.map((id) => [id, []]))
  for (const row of rows) committed.get(row.id)!.push(Number(row.token))
  expect(acknowledged.length).toBeGreaterThanOrEqual(ENOUGH_WRITES)
  for (const write of acknowledged) expect(committed.get(write.id)).toContain(write.token)
  for (const [id, tokens] of committed) {
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThanOrEqual(tokens[i - 1]!)
    const { rows: current } = await admin.query(
      'SELECT fencing_token FROM invoices WHERE id = $1',
      [id],
    )
    expect(Number(current[0].fencing_token)).toBe(Math.max(0, ...tokens))
  }
  // The faults did bite: some writes failed on a lost connection.
  expect(failed).toBeGreaterThan(0)
})
