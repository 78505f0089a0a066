import type pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import {
  fencedDatabase,
  leader,
  sqlstateOf,
  storyFencing,
  storySchemaSql,
  type FencedDatabase,
} from './support.js'

let fenced: FencedDatabase
let direct: pg.Client

beforeAll(async () => {
  fenced = await fencedDatabase('resource_dynamic', storyFencing, storySchemaSql)
  direct = await fenced.connectDirect()
})

afterAll(async () => {
  await fenced?.close()
})

const fences = async (): Promise<Record<string, string>> =>
  Object.fromEntries(
    (await direct.query('SELECT resource, token::text FROM pgfence.resource_fences')).rows.map(
      (row) => [row.resource, row.token],
    ),
  )

test('resources named by the session and by a comment are fenced independently', async () => {
  const tenant1 = await leader(fenced, 50)
  await tenant1.query("SET app.fencing_resource = 'tenant:1'")
  await tenant1.query("INSERT INTO tenant_jobs (id, tenant, state) VALUES (1, 'tenant:1', 'new')")

  // Another tenant's lower token is not stale: its resource has its own fence.
  const tenant2 = await fenced.connect()
  await tenant2.query(
    "/* fencing_resource='tenant:2',fencing_token='7' */ INSERT INTO tenant_jobs (id, tenant, state) VALUES (2, 'tenant:2', 'new')",
  )
  expect(await fences()).toEqual({ 'tenant:1': '50', 'tenant:2': '7' })

  // The comment overrides the session's resource for that statement only.
  expect(
    await sqlstateOf(
      tenant1.query(
        "UPDATE tenant_jobs SET state = 'x' WHERE id = 2 /*fencing_resource='tenant:2',fencing_token='6'*/",
      ),
    ),
  ).toBe('PF409')
  await tenant1.query(
    "UPDATE tenant_jobs SET state = 'mine' WHERE id = 2 -- fencing_resource=tenant:2",
  )
  expect(await fences()).toEqual({ 'tenant:1': '50', 'tenant:2': '50' })
  await tenant1.query("UPDATE tenant_jobs SET state = 'done' WHERE id = 1")

  // A fixed-resource table ignores the session's resource name.
  await tenant1.query('INSERT INTO payouts (id, amount) VALUES (1, 1)')
  expect(await fences()).toEqual({ 'tenant:1': '50', 'tenant:2': '50', 'nightly-billing': '50' })
  const { rows } = await direct.query('SELECT id, state FROM tenant_jobs ORDER BY id')
  expect(rows).toEqual([
    { id: 1, state: 'done' },
    { id: 2, state: 'mine' },
  ])
})

test('no resource name for a session-named table is PF428; SET LOCAL ends with its transaction', async () => {
  const client = await leader(fenced, 60)
  expect(await sqlstateOf(client.query("UPDATE tenant_jobs SET state = 'x'"))).toBe('PF428')
  await client.query('BEGIN')
  await client.query("SET LOCAL app.fencing_resource = 'tenant:3'")
  await client.query("INSERT INTO tenant_jobs (id, tenant, state) VALUES (3, 'tenant:3', 'new')")
  await client.query('COMMIT')
  expect(await sqlstateOf(client.query("UPDATE tenant_jobs SET state = 'x'"))).toBe('PF428')
  expect((await fences())['tenant:3']).toBe('60')
})

test('the same statement text with different comment values is rewritten for each value', async () => {
  const client = await fenced.connect()
  for (const [tenant, token] of [
    ['tenant:4', 1],
    ['tenant:5', 2],
    ['tenant:4', 3],
  ] as const) {
    await client.query(
      `/* fencing_resource='${tenant}',fencing_token='${token}' */ INSERT INTO tenant_jobs (id, tenant, state) VALUES (${10 + token}, '${tenant}', 'new')`,
    )
  }
  const all = await fences()
  expect([all['tenant:4'], all['tenant:5']]).toEqual(['3', '2'])
})
