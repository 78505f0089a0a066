import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { installSql } from '../../src/schema/install.js'
import { query } from '../../src/wire/messages.js'
import { rawClientOf } from '../pool/raw-client.js'
import {
  adminQuery,
  createTestDatabase,
  maintenanceSession,
  type TestDatabase,
} from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { poolUnderTest, startTestProxy, type TestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'

// README "Maintenance": under pgfence.maintenance a superuser or a member of pgfence_maintenance
// writes fenced tables "the fence column included", through pgfence as on a direct connection;
// any other role gets 42501. Run on both relays and through both pools (vitest.config.ts).
const fencing = { tables: [{ name: 'invoices' }] }
const suffix = randomBytes(4).toString('hex')
const plainRole = `pgfence_mw_plain_${suffix}`
const memberRole = `pgfence_mw_member_${suffix}`

let db: TestDatabase
let admin: pg.Client
let proxy: TestProxy
const clients: pg.Client[] = []

beforeAll(async () => {
  db = await createTestDatabase('maintenance_writes')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL DEFAULT $$NEW$$)',
  )
  await admin.query(installSql(parseConfig({ fencing }).fencing))
  await adminQuery(`CREATE ROLE ${plainRole} LOGIN; CREATE ROLE ${memberRole} LOGIN;
    GRANT pgfence_maintenance TO ${memberRole}`)
  await admin.query(`GRANT ALL ON invoices TO ${plainRole}, ${memberRole}`)
  // A pooled run (PGFENCE_TEST_POOL) authenticates all three users itself.
  const mode = poolUnderTest()
  const users = ['postgres', plainRole, memberRole].map((u) => `"${u}" "${POOL_PASSWORD}"`)
  const pooled = mode ? { pool: { mode, size: 4 }, auth: { file: writeUserlist(users) } } : {}
  proxy = await startTestProxy({ fencing, ...pooled }, db.url)
})

afterAll(async () => {
  await Promise.all(clients.map((client) => client.end().catch(() => undefined)))
  await proxy?.close()
  await admin?.end()
  await db?.drop()
  await adminQuery(`DROP ROLE IF EXISTS ${plainRole}, ${memberRole}`)
})

async function connect(user = 'postgres', options?: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: proxy.url(user, db.name, POOL_PASSWORD),
    ...(options ? { options } : {}),
  })
  await client.connect()
  clients.push(client)
  return client
}

/** Row 99 put back to token 100. */
const seed = () =>
  admin.query(`INSERT INTO invoices (id, fencing_token) VALUES (99, 100)
               ON CONFLICT (id) DO UPDATE SET fencing_token = 100`)

const token99 = async () =>
  (await admin.query('SELECT fencing_token FROM invoices WHERE id = 99')).rows[0].fencing_token

/** The SQLSTATE of setting row 99's fence column to `value`, and the row's token after it. */
async function writeFence(client: pg.Client, value: number, text?: string): Promise<string[]> {
  const sql = text ?? `UPDATE invoices SET fencing_token = ${value} WHERE id = 99`
  const code = await sqlstateOf(client.query(sql))
  return [code, await token99()]
}

test('a superuser under SET pgfence.maintenance writes the fence column; RESET refuses it again', async () => {
  await seed()
  const client = await connect()
  // First without maintenance: the native relay keeps the refusal's template for the text.
  expect(await writeFence(client, 1)).toEqual(['PF501', '100'])
  await client.query('SET pgfence.maintenance = on')
  expect(await writeFence(client, 2)).toEqual(['ok', '2'])
  const update = await client.query('UPDATE invoices SET fencing_token = 3 WHERE id = 99')
  expect(update.rowCount).toBe(1)
  // Extended protocol, and an INSERT and an upsert that name the column.
  const extended = 'UPDATE invoices SET fencing_token = $1 WHERE id = 99'
  expect(await sqlstateOf(client.query(extended, [4]))).toBe('ok')
  expect(await token99()).toBe('4')
  await client.query('INSERT INTO invoices (id, fencing_token) VALUES (98, 42)')
  await client.query(`INSERT INTO invoices (id, fencing_token) VALUES (98, 43)
                      ON CONFLICT (id) DO UPDATE SET fencing_token = 44`)
  const row98 = await admin.query('SELECT fencing_token FROM invoices WHERE id = 98')
  expect(row98.rows).toEqual([{ fencing_token: '44' }])
  await client.query('RESET pgfence.maintenance')
  expect(await writeFence(client, 5)).toEqual(['PF501', '4'])
  expect(await sqlstateOf(client.query(extended, [6]))).toBe('PF501')
  // In the same query as the SET that turns it on.
  const both = 'SET pgfence.maintenance = on; UPDATE invoices SET fencing_token = 7 WHERE id = 99'
  expect(await writeFence(client, 7, both)).toEqual(['ok', '7'])
  await client.query('SET pgfence.maintenance = off')
  expect(await writeFence(client, 8)).toEqual(['PF501', '7'])
})

test('SET LOCAL and set_config: up to the end of the transaction, as PostgreSQL keeps them', async () => {
  await seed()
  const client = await connect()
  await client.query('BEGIN')
  await client.query('SET LOCAL pgfence.maintenance = on')
  expect(await writeFence(client, 11)).toEqual(['ok', '100']) // not committed yet
  await client.query('COMMIT')
  expect(await token99()).toBe('11')
  expect(await writeFence(client, 12)).toEqual(['PF501', '11'])
  await client.query("SELECT set_config('pgfence.maintenance', 'on', false)")
  expect(await writeFence(client, 13)).toEqual(['ok', '13'])
  await client.query("SELECT set_config('pgfence.maintenance', 'off', false)")
  expect(await writeFence(client, 14)).toEqual(['PF501', '13'])
  // Turned on in a transaction that rolls back: pgfence cannot tell, so the trigger refuses.
  await client.query('BEGIN')
  await client.query('SET pgfence.maintenance = on')
  await client.query('ROLLBACK')
  await client.query('SET app.fencing_token = 200')
  expect(await writeFence(client, 15)).toEqual(['PF501', '13'])
  await client.query('RESET app.fencing_token')
})

/** What each Query of one write got: its command tag, or its SQLSTATE. */
async function pipelined(client: pg.Client, ...texts: string[]): Promise<string[]> {
  const raw = rawClientOf(client)
  await raw.send(Buffer.concat(texts.map(query)))
  const replies = await raw.replies(texts.length)
  return replies
    .filter((m) => m.type === 'C' || m.type === 'E')
    .map((m) => {
      const text = m.body.toString('utf8')
      return m.type === 'C' ? text.slice(0, -1) : (/\0C([^\0]*)\0/.exec(`\0${text}`)?.[1] ?? '?')
    })
}

test('a switch and a write in one read: the write follows the switch, cached template or not', async () => {
  await seed()
  const client = await connect()
  expect(await writeFence(client, 40)).toEqual(['PF501', '100'])
  // node-postgres settles a failed query at its ErrorResponse: the ReadyForQuery after it must
  // reach node-postgres (it runs the next query only then), not the raw reads below.
  await client.query('SELECT 1')
  const update = 'UPDATE invoices SET fencing_token = 41 WHERE id = 99'
  const on = await pipelined(client, 'SET pgfence.maintenance = on', update)
  expect(on).toEqual(['SET', 'UPDATE 1'])
  expect(await token99()).toBe('41')
  const off = await pipelined(client, 'RESET pgfence.maintenance', update.replace('41', '42'))
  expect(off).toEqual(['RESET', 'PF501'])
  expect(await token99()).toBe('41')
})

test('startup options turn it on', async () => {
  await seed()
  const client = await connect('postgres', '-c pgfence.maintenance=on')
  expect(await writeFence(client, 21)).toEqual(['ok', '21'])
})

test('a role outside pgfence_maintenance gets 42501 from the trigger; a member writes', async () => {
  await seed()
  const plain = await connect(plainRole)
  expect(await writeFence(plain, 31)).toEqual(['PF501', '100'])
  await plain.query('SET pgfence.maintenance = on')
  expect(await writeFence(plain, 32)).toEqual(['42501', '100'])
  const member = await connect(memberRole)
  expect(await writeFence(member, 33)).toEqual(['PF501', '100'])
  await member.query('SET pgfence.maintenance = on')
  expect(await writeFence(member, 34)).toEqual(['ok', '34'])
})
