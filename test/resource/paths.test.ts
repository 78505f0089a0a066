import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { maintenanceSession } from '../support/database.js'
import {
  fencedDatabase,
  sqlstateOf,
  storyFencing,
  storySchemaSql,
  waitUntilBlocked,
  type FencedDatabase,
} from './support.js'

// The resource fence of payouts (nightly-billing) on paths the proxy's rewrite never sees.
const pathsSql = `
CREATE TABLE payouts_archive () INHERITS (payouts);
CREATE VIEW payouts_v AS SELECT id, amount FROM payouts;
CREATE FUNCTION pay(i int, a int) RETURNS void LANGUAGE sql AS
  $$ UPDATE payouts SET amount = a WHERE id = i $$;
CREATE TABLE requests (id int, amount int);
CREATE FUNCTION requests_pay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO payouts (id, amount) VALUES (NEW.id, NEW.amount); RETURN NEW; END $$;
CREATE TRIGGER requests_pay AFTER INSERT ON requests FOR EACH ROW EXECUTE FUNCTION requests_pay();
`

let fenced: FencedDatabase
let direct: pg.Client
let admin: pg.Client

beforeAll(async () => {
  fenced = await fencedDatabase('resource_paths', storyFencing, storySchemaSql + pathsSql)
  direct = await fenced.connectDirect()
  admin = new pg.Client({ connectionString: fenced.db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query('CREATE TABLE payouts_late () INHERITS (payouts)')
  await admin.query("SELECT pgfence.raise_fence('nightly-billing', 100)")
})

afterAll(async () => {
  await admin?.end()
  await fenced?.close()
})

const fence = async (): Promise<string | undefined> =>
  (
    await admin.query(
      "SELECT token::text FROM pgfence.resource_fences WHERE resource = 'nightly-billing'",
    )
  ).rows[0]?.token

const writes = [
  { path: 'plain write', sql: (n: number) => `INSERT INTO payouts (id, amount) VALUES (${n}, 1)` },
  {
    path: 'inheritance child',
    sql: (n: number) => `INSERT INTO payouts_archive (id, amount) VALUES (${n}, 1)`,
  },
  {
    path: 'child created after migrate',
    sql: (n: number) => `INSERT INTO payouts_late (id, amount) VALUES (${n}, 1)`,
  },
  { path: 'updatable view', sql: (n: number) => `UPDATE payouts_v SET amount = ${n}` },
  { path: 'SQL function', sql: (n: number) => `SELECT pay(1, ${n})` },
  {
    path: 'trigger of another table',
    sql: (n: number) => `INSERT INTO requests (id, amount) VALUES (${n}, 1)`,
  },
  { path: 'TRUNCATE', sql: () => 'TRUNCATE payouts_archive' },
]

describe.each(writes)('$path on a direct connection', ({ sql }) => {
  test('no token is PF428, a stale one PF409, a fresh one raises the fence', async () => {
    const n = 1000 + writes.findIndex((w) => w.sql === sql) * 10
    await direct.query('RESET ALL')
    expect(await sqlstateOf(direct.query(sql(n)))).toBe('PF428')
    const current = Number(await fence())
    await direct.query(`SET app.fencing_token = ${current - 1}`)
    expect(await sqlstateOf(direct.query(sql(n + 1)))).toBe('PF409')
    await direct.query(`SET app.fencing_token = ${current + 1}`)
    expect(await sqlstateOf(direct.query(sql(n + 2)))).toBe('ok')
    expect(await fence()).toBe(String(current + 1))
  })
})

test('through pgfence, a comment token reaches the writes a statement causes', async () => {
  await admin.query("SELECT pgfence.raise_fence('nightly-billing', 5000)")
  const client = await fenced.connect()
  expect(await sqlstateOf(client.query("/*fencing_token='4999'*/ SELECT pay(1, 7)"))).toBe('PF409')
  expect(await sqlstateOf(client.query("/*fencing_token='5001'*/ SELECT pay(1, 7)"))).toBe('ok')
  expect(await fence()).toBe('5001')
})

test('maintenance writes with no token and moves no fence', async () => {
  const before = await fence()
  await admin.query('INSERT INTO payouts_archive (id, amount) VALUES (9001, 1)')
  expect(await fence()).toBe(before)
})

test("the trigger's raise waits for an old holder's open transaction, which then fails", async () => {
  const current = Number(await fence())
  const old = await fenced.connectDirect()
  await old.query(`SET app.fencing_token = ${current + 1}`)
  await old.query('BEGIN')
  await old.query('SELECT pay(1, 1)')
  const next = await fenced.connectDirect()
  const nextPid = (await next.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
  await next.query(`SET app.fencing_token = ${current + 2}`)
  const raise = next.query('SELECT pay(1, 2)')
  await waitUntilBlocked(admin, nextPid)
  await old.query('COMMIT')
  expect(await sqlstateOf(raise)).toBe('ok')
  expect(await sqlstateOf(old.query('SELECT pay(1, 3)'))).toBe('PF409')
  expect(await fence()).toBe(String(current + 2))
})

test('a transaction that entered the resource once does not enter it again', async () => {
  const client = await fenced.connectDirect()
  const current = Number(await fence())
  await client.query(`SET app.fencing_token = ${current + 1}`)
  await client.query('BEGIN')
  await client.query('SELECT pay(1, 4)')
  const entered = await client.query("SELECT current_setting('pgfence.entered_resource') AS e")
  expect(entered.rows[0].e).toMatch(new RegExp(`^\\d+ ${current + 1} nightly-billing$`))
  await client.query("SET LOCAL pgfence.entered_resource = 'forged'")
  expect(await sqlstateOf(client.query('SELECT pay(1, 5)'))).toBe('ok')
  await client.query('COMMIT')
  // A value set by hand names no transaction of its own: it admits nothing.
  await client.query(`SET pgfence.entered_resource = '0 ${current + 1} nightly-billing'`)
  await client.query(`SET app.fencing_token = ${current}`)
  expect(await sqlstateOf(client.query('SELECT pay(1, 6)'))).toBe('PF409')
})
