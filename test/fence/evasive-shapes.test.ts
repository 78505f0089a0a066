import pg from 'pg'
import { afterAll, beforeAll, beforeEach, expect, test } from 'vitest'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import {
  fencedClient,
  fencingConfig,
  installFencing,
  invoicesSql,
  seedInvoice99,
  sqlstateOf,
  type FencedClient,
} from './support.js'

const fencing = fencingConfig({
  tables: [{ name: 'invoices', column: 'fencing_token', requireToken: true }],
})
let db: TestDatabase
let admin: pg.Client
let app: FencedClient

const snapshot = async (): Promise<unknown[]> =>
  (await admin.query('SELECT * FROM invoices ORDER BY id')).rows

beforeAll(async () => {
  db = await createTestDatabase('fence_evasive')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(invoicesSql)
  await admin.query('CREATE TABLE other (id int)')
  await installFencing(db.url, fencing)
  app = await fencedClient(db.url, fencing)
})

afterAll(async () => {
  await app?.end()
  await admin?.end()
  await db?.drop()
})

beforeEach(async () => {
  await admin.query(seedInvoice99)
  // The committed token is 100; this session holds the stale 50.
  await app.query('SET app.fencing_token = 50')
})

// Each shape runs with the stale session token 50: it must be fenced (PF409) or refused (PF501),
// or write nothing (ok).
const shapes: [string, 'PF409' | 'PF501' | 'ok'][] = [
  ["UPDATE ONLY invoices SET status = 'x'", 'PF409'],
  ["UPDATE public.invoices AS i SET status = 'x' WHERE i.id = 99", 'PF409'],
  ['UPDATE "invoices" SET status = \'x\'', 'PF409'],
  ['UPDATE "public"."invoices" SET status = \'x\'', 'PF409'],
  ["update INVOICES set status = 'x'", 'PF409'],
  ['UPDATE U&"\\0069nvoices" SET status = \'x\'', 'PF409'],
  [
    "UPDATE invoices i SET status = o.status FROM (SELECT 99 AS id, 'x' AS status) o WHERE i.id = o.id",
    'PF409',
  ],
  ["UPDATE invoices SET (status, amount) = ('x', 5) WHERE id = 99", 'PF409'],
  ["UPDATE invoices SET (status, amount) = (SELECT 'x', 5) WHERE id = 99", 'PF409'],
  ["UPDATE invoices SET status = 'x' WHERE id = 99 RETURNING *", 'PF409'],
  ["UPDATE invoices SET status = '/* fencing_token=500 */' WHERE id = 99", 'PF409'],
  ['UPDATE invoices SET status = $$ -- fencing_token=500 $$ WHERE id = 99', 'PF409'],
  ["UPDATE invoices SET status = 'x' WHERE id = 99 /* fencing_token=60 */", 'PF409'],
  ['DELETE FROM invoices WHERE id = 99', 'PF409'],
  ['DELETE FROM ONLY invoices i USING (SELECT 99 AS id) o WHERE i.id = o.id', 'PF409'],
  ['DELETE FROM invoices WHERE id IN (SELECT 99)', 'PF409'],
  ['DELETE FROM invoices', 'PF409'],
  ["WITH u AS (UPDATE invoices SET status = 'x' RETURNING id) SELECT * FROM u", 'PF409'],
  ['WITH a AS (SELECT 1), b AS (DELETE FROM invoices RETURNING id) SELECT * FROM b', 'PF409'],
  [
    'WITH b AS (DELETE FROM invoices RETURNING id) INSERT INTO other (id) SELECT id FROM b',
    'PF409',
  ],
  [
    "INSERT INTO invoices (id, status) VALUES (99, 'x') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status",
    'PF409',
  ],
  [
    "INSERT INTO invoices AS i (id, status) SELECT 99, 'x' ON CONFLICT (id) DO UPDATE SET status = 'x' WHERE i.id = 99",
    'PF409',
  ],
  [
    "MERGE INTO invoices i USING (SELECT 99 AS id) s ON i.id = s.id WHEN MATCHED THEN UPDATE SET status = 'x'",
    'PF409',
  ],
  [
    'MERGE INTO invoices i USING (SELECT 99 AS id) s ON i.id = s.id WHEN MATCHED THEN DELETE',
    'PF409',
  ],
  ["EXPLAIN ANALYZE UPDATE invoices SET status = 'x'", 'PF409'],
  ["PREPARE ev AS UPDATE invoices SET status = 'x'; EXECUTE ev", 'PF409'],
  ["SELECT 1; UPDATE invoices SET status = 'x'; SELECT 2", 'PF409'],
  [
    "BEGIN; DECLARE c CURSOR FOR SELECT * FROM invoices FOR UPDATE; FETCH c; UPDATE invoices SET status = 'x' WHERE CURRENT OF c; COMMIT",
    'PF409',
  ],
  [
    'BEGIN; DECLARE c CURSOR FOR SELECT * FROM invoices FOR UPDATE; FETCH c; DELETE FROM invoices WHERE CURRENT OF c; COMMIT',
    'PF501',
  ],
  ['UPDATE invoices SET fencing_token = 1000', 'PF501'],
  ["UPDATE invoices SET (status, fencing_token) = ('x', 1000)", 'PF501'],
  [
    "INSERT INTO invoices (id, status, fencing_token) VALUES (99, 'x', 1000) ON CONFLICT (id) DO UPDATE SET status = 'x'",
    'PF501',
  ],
  [
    "INSERT INTO invoices (id, status) VALUES (99, 'x') ON CONFLICT (id) DO UPDATE SET fencing_token = 1000",
    'PF501',
  ],
  // Without a column list the values fill the columns in order; the fence trigger checks them.
  ["INSERT INTO invoices VALUES (99, 'x') ON CONFLICT DO NOTHING", 'ok'],
  ["INSERT INTO invoices VALUES (99, 'x') ON CONFLICT (id) DO UPDATE SET status = 'y'", 'PF409'],
  ["INSERT INTO invoices VALUES (98, 'x', 0, 1000)", 'PF501'],
  [
    'MERGE INTO invoices i USING (SELECT 99 AS id) s ON i.id = s.id WHEN MATCHED THEN UPDATE SET fencing_token = 1000',
    'PF501',
  ],
  ['TRUNCATE invoices', 'PF501'],
  ['TRUNCATE TABLE other, public.invoices', 'PF501'],
  ['COPY invoices FROM STDIN', 'PF501'],
  ["DO $$BEGIN UPDATE invoices SET status = 'x'; END$$", 'PF501'],
  ["DO $$BEGIN EXECUTE 'UPDATE ' || 'invoices SET status = ''x'''; END$$", 'PF501'],
  ['CREATE RULE r AS ON UPDATE TO invoices DO INSTEAD NOTHING', 'PF501'],
  ['UPDATE invoices SET status = ', 'PF501'],
]

test.each(shapes)('%s → %s, nothing changes', async (sql, code) => {
  const before = await snapshot()
  expect(await sqlstateOf(app.query(sql))).toBe(code)
  await app.query('ROLLBACK').catch(() => undefined)
  expect(await snapshot()).toEqual(before)
})

test('the same shapes with the current token commit (the fence is not a blanket refusal)', async () => {
  await app.query('SET app.fencing_token = 100')
  for (const [sql, code] of shapes) {
    if (code !== 'PF409') continue
    await admin.query(seedInvoice99)
    expect(
      await sqlstateOf(app.query(sql.replace('fencing_token=60', 'fencing_token=100'))),
      sql,
    ).toBe('ok')
    await app.query('DEALLOCATE ALL')
  }
})
