import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import type { LeaseManager } from '../../src/lease/index.js'
import { managerFactory, uniqueKeyPrefix } from '../lease/support/lease-fixtures.js'
import { fencedDatabase, sqlstateOf, type FencedDatabase } from './support.js'

const fencing = {
  rejectUnissuedTokens: true,
  tables: [{ name: 'invoices' }],
  resources: [{ tables: ['tenant_jobs'], resourceFrom: 'session' as const }],
}
const schema = `
CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL);
CREATE TABLE tenant_jobs (id int PRIMARY KEY, state text NOT NULL);
`

let fenced: FencedDatabase
let direct: pg.Client
let managers: ReturnType<typeof managerFactory>
let leases: LeaseManager

beforeAll(async () => {
  fenced = await fencedDatabase('resource_lease', fencing, schema)
  direct = await fenced.connectDirect()
  managers = managerFactory({ tokenSource: fenced.db.url, keyPrefix: uniqueKeyPrefix('resource') })
  leases = managers.create({ ttlMs: 10_000 })
})

afterAll(async () => {
  await managers?.closeAll()
  await fenced?.close()
})

const fenceOf = async (resource: string): Promise<string | null> =>
  (
    await direct.query('SELECT token::text FROM pgfence.resource_fences WHERE resource = $1', [
      resource,
    ])
  ).rows[0]?.token ?? null

test('applyTo presents the token and the resource; raiseFence raises the fence to the token', async () => {
  const lease = await leases.acquire('tenant:1')
  const client = await fenced.connect()
  await lease.applyTo(client)
  const { rows } = await client.query(
    "SELECT current_setting('app.fencing_token') AS token, current_setting('app.fencing_resource') AS resource",
  )
  expect(rows[0]).toEqual({ token: lease.token.toString(), resource: 'tenant:1' })
  await lease.raiseFence(client)
  expect(await fenceOf('tenant:1')).toBe(lease.token.toString())
  await client.query("INSERT INTO tenant_jobs (id, state) VALUES (1, 'by the first holder')")
  await lease.release()

  const next = await leases.acquire('tenant:1')
  const nextClient = await fenced.connect()
  await next.applyTo(nextClient)
  await next.raiseFence(nextClient)
  expect(await sqlstateOf(client.query("UPDATE tenant_jobs SET state = 'late'"))).toBe('PF409')
  expect(await sqlstateOf(lease.raiseFence(client))).toBe('PF409')
  await nextClient.query("UPDATE tenant_jobs SET state = 'by the second holder'")
  await next.release()
  expect((await direct.query('SELECT state FROM tenant_jobs')).rows).toEqual([
    { state: 'by the second holder' },
  ])
})

test('applyToTransaction presents the lease until the transaction ends, never to the next borrower', async () => {
  const lease = await leases.acquire('tenant:5')
  const pool = new pg.Pool({ connectionString: fenced.proxyUrl, max: 1 })
  try {
    const settings =
      "SELECT current_setting('app.fencing_token', true) AS token, current_setting('app.fencing_resource', true) AS resource"
    const client = await pool.connect()
    await client.query('BEGIN')
    await lease.applyToTransaction(client)
    expect((await client.query(settings)).rows[0]).toEqual({
      token: lease.token.toString(),
      resource: 'tenant:5',
    })
    await client.query("INSERT INTO tenant_jobs (id, state) VALUES (5, 'fenced')")
    await client.query('COMMIT')
    client.release()
    expect(await fenceOf('tenant:5')).toBe(lease.token.toString())

    const next = await pool.connect()
    expect((await next.query(settings)).rows[0]).toEqual({ token: '', resource: '' })
    expect(await sqlstateOf(next.query("UPDATE tenant_jobs SET state = 'x'"))).toBe('PF428')
    next.release()
  } finally {
    await pool.end()
    await lease.release()
  }
})

test('withLease raises the fence before the work runs, and releases when the raise is refused', async () => {
  const client = await fenced.connect()
  const seenInWork = await leases.withLease(
    'tenant:2',
    async (lease) => [lease.token.toString(), await fenceOf('tenant:2')],
    { raiseFence: client },
  )
  expect(seenInWork[1]).toBe(seenInWork[0])

  await direct.query("SELECT pgfence.raise_fence('tenant:3', 9223372036854775807)")
  let ran = false
  const refused = leases.withLease('tenant:3', async () => (ran = true), { raiseFence: client })
  expect(await sqlstateOf(refused)).toBe('PF409')
  expect(ran).toBe(false)
  // Released: the lease can be taken again at once.
  await (await leases.acquire('tenant:3')).release()
})

test('rejectUnissuedTokens: a token above the highest issued one is PF400 for row and resource fences', async () => {
  const lease = await leases.acquire('tenant:4')
  const client = await fenced.connect()
  await client.query("SET app.fencing_resource = 'tenant:4'")
  const typo = lease.token + 1_000_000n
  await client.query(`SET app.fencing_token = ${typo}`)
  expect(
    await sqlstateOf(client.query("INSERT INTO tenant_jobs (id, state) VALUES (4, 'x')")),
  ).toBe('PF400')
  expect(await sqlstateOf(client.query("INSERT INTO invoices (id, status) VALUES (4, 'x')"))).toBe(
    'PF400',
  )
  expect(await fenceOf('tenant:4')).toBeNull()

  await lease.applyTo(client)
  await client.query("INSERT INTO tenant_jobs (id, state) VALUES (4, 'x')")
  await client.query("INSERT INTO invoices (id, status) VALUES (4, 'x')")
  expect(await fenceOf('tenant:4')).toBe(lease.token.toString())
  await client.query(`SET app.fencing_token = ${typo}`)
  expect(await sqlstateOf(client.query("UPDATE invoices SET status = 'y' WHERE id = 4"))).toBe(
    'PF400',
  )
  await lease.release()
})
