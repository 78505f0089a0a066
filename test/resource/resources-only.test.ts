import { afterAll, beforeAll, expect, test } from 'vitest'
import { fencedDatabase, type FencedDatabase } from './support.js'

let fenced: FencedDatabase

beforeAll(async () => {
  fenced = await fencedDatabase(
    'resources_only',
    { resources: [{ tables: ['payouts'], resource: 'nightly-billing' }] },
    'CREATE TABLE payouts (id int PRIMARY KEY, amount int NOT NULL)',
  )
})

afterAll(() => fenced?.close())

test('a config with resource rules and no row-fenced table still fences member writes', async () => {
  const leader = await fenced.connect()
  await leader.query('SET app.fencing_token = 7')
  await leader.query('INSERT INTO payouts (id, amount) VALUES (1, 10)')
  await leader.query("SELECT pgfence.raise_fence('nightly-billing', 8)")
  const stale = await leader
    .query('INSERT INTO payouts (id, amount) VALUES (2, 20)')
    .catch((e) => e)
  expect(stale.code).toBe('PF409')
  const { rows } = await (await fenced.connectDirect()).query('SELECT id FROM payouts ORDER BY id')
  expect(rows).toEqual([{ id: 1 }])
})
