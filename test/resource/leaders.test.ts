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
  fenced = await fencedDatabase('resource_leaders', storyFencing, storySchemaSql)
  direct = await fenced.connectDirect()
})

afterAll(async () => {
  await fenced?.close()
})

const fenceOf = async (resource: string): Promise<string | null> => {
  const { rows } = await direct.query(
    'SELECT token::text FROM pgfence.resource_fences WHERE resource = $1',
    [resource],
  )
  return rows[0]?.token ?? null
}

const payoutIds = async (): Promise<number[]> =>
  (await direct.query('SELECT id FROM payouts ORDER BY id')).rows.map((row) => row.id)

test('a new leader raises the fence; every write of the old leader is refused and lands nothing', async () => {
  const a = await leader(fenced, 10)
  const inserted = await a.query(
    "INSERT INTO payouts (id, amount, due) VALUES (1, 100, '2026-01-01') RETURNING id, due::text",
  )
  expect(inserted.command).toBe('INSERT')
  expect(inserted.rows).toEqual([{ id: 1, due: '2026-01-01' }])
  expect(await fenceOf('nightly-billing')).toBe('10')

  const b = await leader(fenced, 11)
  const raised = await b.query("SELECT pgfence.raise_fence('nightly-billing', 11) AS token")
  expect(raised.rows[0].token).toBe('11')

  const stale = [
    'INSERT INTO payouts (id, amount) VALUES (2, 200)',
    'INSERT INTO payouts (id, amount) SELECT 3, 300',
    'INSERT INTO payouts (id, amount) VALUES (4, 1), (5, 1)',
    'UPDATE payouts SET amount = 0',
    'DELETE FROM payouts',
    "INSERT INTO ledger_entries (note) VALUES ('late')",
    'MERGE INTO payouts p USING (SELECT 1 AS id) s ON p.id = s.id WHEN MATCHED THEN UPDATE SET amount = 9',
    'TRUNCATE payouts',
  ]
  for (const sql of stale) expect([sql, await sqlstateOf(a.query(sql))]).toEqual([sql, 'PF409'])
  // Extended protocol, named statement: same refusal.
  expect(
    await sqlstateOf(
      a.query({
        name: 'late',
        text: 'UPDATE payouts SET amount = $1 WHERE id = $2',
        values: [5, 1],
      }),
    ),
  ).toBe('PF409')
  expect(await payoutIds()).toEqual([1])
  expect((await direct.query('SELECT amount FROM payouts')).rows).toEqual([{ amount: 100 }])
  expect((await direct.query('SELECT count(*)::int AS n FROM ledger_entries')).rows[0].n).toBe(0)

  const updated = await b.query('UPDATE payouts SET amount = amount + 1 WHERE id = 1')
  expect([updated.command, updated.rowCount]).toEqual(['UPDATE', 1])
  const many = await b
    .query('INSERT INTO payouts (id, amount) VALUES (6, 1), (7, DEFAULT + 1)')
    .catch((err: Error) => err)
  // DEFAULT inside an expression is a plain PostgreSQL error, not a fence refusal.
  expect((many as { code?: string }).code).toBe('42601')
  const pair = await b.query('INSERT INTO payouts (id, amount) VALUES (6, 1), (7, 1)')
  expect([pair.command, pair.rowCount]).toEqual(['INSERT', 2])
  expect(await payoutIds()).toEqual([1, 6, 7])
  expect(await fenceOf('nightly-billing')).toBe('11')

  expect(await sqlstateOf(b.query("SELECT pgfence.raise_fence('nightly-billing', 10)"))).toBe(
    'PF409',
  )
  expect(await fenceOf('nightly-billing')).toBe('11')
})

test('the refusal is a real error: message, DETAIL with both tokens, table fields; it aborts the transaction', async () => {
  const old = await leader(fenced, 3)
  await old.query('BEGIN')
  const err = (await old.query('DELETE FROM payouts WHERE id = 1').catch((e: unknown) => e)) as {
    code: string
    message: string
    detail: string
    table: string
    schema: string
  }
  expect(err.code).toBe('PF409')
  expect(err.message).toBe('stale fencing token')
  expect(err.detail).toMatch(
    /incoming token 3 is lower than the committed token 11 of resource 'nightly-billing'/,
  )
  expect([err.schema, err.table]).toEqual(['public', 'payouts'])
  expect(await sqlstateOf(old.query('SELECT 1'))).toBe('25P02')
  await old.query('ROLLBACK')
  expect(await payoutIds()).toEqual([1, 6, 7])
})

test('a member write without a token is PF428; reads need no token', async () => {
  const anonymous = await fenced.connect()
  expect(await sqlstateOf(anonymous.query('UPDATE payouts SET amount = 1'))).toBe('PF428')
  expect(await sqlstateOf(anonymous.query("INSERT INTO ledger_entries (note) VALUES ('x')"))).toBe(
    'PF428',
  )
  const read = await anonymous.query('SELECT count(*)::int AS n FROM payouts')
  expect(read.rows[0].n).toBe(3)
  expect(await sqlstateOf(anonymous.query('SELECT * FROM payouts FOR UPDATE'))).toBe('ok')
})

test('an equal token writes many times; a comment token overrides the session token', async () => {
  const b = await leader(fenced, 11)
  for (let i = 0; i < 3; i++) await b.query(`INSERT INTO ledger_entries (note) VALUES ('b${i}')`)
  const stale = await leader(fenced, 11)
  expect(
    await sqlstateOf(
      stale.query("/*fencing_token='9'*/ INSERT INTO ledger_entries (note) VALUES ('x')"),
    ),
  ).toBe('PF409')
  await stale.query("INSERT INTO ledger_entries (note) VALUES ('c') /* fencing_token=12 */")
  expect(await fenceOf('nightly-billing')).toBe('12')
  expect(await sqlstateOf(b.query("INSERT INTO ledger_entries (note) VALUES ('late')"))).toBe(
    'PF409',
  )
})

test('COPY FROM and TRUNCATE enter the resource; TRUNCATE answers DO', async () => {
  const current = await leader(fenced, 12)
  const copy = await current.query('COPY ledger_entries (note) FROM PROGRAM \'printf "x\\ny\\n"\'')
  expect([copy.command, copy.rowCount]).toEqual(['COPY', 2])
  const truncate = await current.query('TRUNCATE ledger_entries')
  expect(truncate.command).toBe('DO')
  expect((await direct.query('SELECT count(*)::int AS n FROM ledger_entries')).rows[0].n).toBe(0)
  const stale = await leader(fenced, 11)
  expect(
    await sqlstateOf(stale.query('COPY ledger_entries (note) FROM PROGRAM \'printf "z\\n"\'')),
  ).toBe('PF409')
  expect(await sqlstateOf(stale.query('TRUNCATE payouts'))).toBe('PF409')
  expect(await payoutIds()).toEqual([1, 6, 7])
})

test('rules, DO blocks and cursor writes on member tables are refused (fail closed)', async () => {
  const current = await leader(fenced, 12)
  expect(
    await sqlstateOf(current.query('CREATE RULE r AS ON INSERT TO payouts DO INSTEAD NOTHING')),
  ).toBe('PF501')
  expect(await sqlstateOf(current.query('DO $$ BEGIN DELETE FROM payouts; END $$'))).toBe('PF501')
  await current.query('BEGIN')
  await current.query('DECLARE c CURSOR FOR SELECT * FROM payouts FOR UPDATE')
  await current.query('FETCH c')
  expect(await sqlstateOf(current.query('DELETE FROM payouts WHERE CURRENT OF c'))).toBe('PF501')
  await current.query('ROLLBACK')
  expect(await payoutIds()).toEqual([1, 6, 7])
})

test('the fence is entered once per statement, by a one-time filter that runs before the scan', async () => {
  const current = await leader(fenced, 12)
  // Counts not yet reported to the statistics system: read before and after, in one transaction
  // (SET LOCAL: under transaction pooling a session SET would last only its own transaction).
  const calls = async (): Promise<number> =>
    (
      await current.query(
        "SELECT coalesce(pg_stat_get_xact_function_calls('pgfence.enter_resource(text,bigint,text)'::regprocedure), 0)::int AS n",
      )
    ).rows[0].n
  const callsIn = async (sql: string): Promise<number> => {
    await current.query('BEGIN')
    try {
      await current.query("SET LOCAL track_functions = 'pl'")
      const before = await calls()
      await current.query(sql)
      return (await calls()) - before
    } finally {
      await current.query('ROLLBACK')
    }
  }
  expect(await callsIn('UPDATE payouts SET amount = amount + 1')).toBe(1)
  expect(await callsIn('DELETE FROM payouts')).toBe(1)
  expect(
    await callsIn('INSERT INTO payouts (id, amount) SELECT g, 1 FROM generate_series(20, 25) g'),
  ).toBe(1)
  expect(await callsIn('INSERT INTO payouts (id, amount) VALUES (30, 1), (31, 1), (32, 1)')).toBe(1)
  // MERGE: once per action that runs (each WHEN clause has its own one-time gate), not per row.
  expect(
    await callsIn(
      'MERGE INTO payouts p USING generate_series(1, 40) s(id) ON p.id = s.id WHEN MATCHED THEN UPDATE SET amount = 0 WHEN NOT MATCHED THEN INSERT (id, amount) VALUES (s.id, 0)',
    ),
  ).toBe(2)
  // Nothing matches: the statement still proves its token.
  expect(await callsIn('UPDATE payouts SET amount = 0 WHERE id < 0')).toBe(1)

  const plan = await current.query('EXPLAIN (COSTS OFF) UPDATE payouts SET amount = 0 WHERE id = 1')
  const lines = plan.rows.map((row) => row['QUERY PLAN'] as string)
  const filter = lines.findIndex((line) => line.includes('One-Time Filter'))
  const scan = lines.findIndex((line) => /Scan .*on payouts/.test(line))
  expect(filter).toBeGreaterThan(0)
  expect(scan).toBeGreaterThan(filter)
})

test('writes nested in CTEs, EXPLAIN ANALYZE and prepared statements are fenced too', async () => {
  const shapes = [
    "WITH x AS (INSERT INTO ledger_entries (note) VALUES ('a'), ('b') RETURNING id) SELECT count(*)::int AS n FROM x",
    'WITH x AS (UPDATE payouts SET amount = amount RETURNING id) SELECT count(*)::int AS n FROM x',
    'INSERT INTO ledger_entries (id, note) VALUES (DEFAULT, $$d$$)',
    'EXPLAIN (ANALYZE, COSTS OFF) DELETE FROM payouts WHERE id = 7',
  ]
  const stale = await leader(fenced, 11)
  for (const sql of shapes)
    expect([sql, await sqlstateOf(stale.query(sql))]).toEqual([sql, 'PF409'])
  await stale.query('PREPARE late AS UPDATE payouts SET amount = $1')
  expect(await sqlstateOf(stale.query('EXECUTE late(0)'))).toBe('PF409')
  expect(await payoutIds()).toEqual([1, 6, 7])

  const current = await leader(fenced, 12)
  const [inserted, updated] = await Promise.all(shapes.slice(0, 2).map((sql) => current.query(sql)))
  expect([inserted!.rows[0].n, updated!.rows[0].n]).toEqual([2, 3])
  await current.query(shapes[2]!)
  await current.query(shapes[3]!)
  await current.query('PREPARE now AS UPDATE payouts SET amount = $1')
  expect((await current.query('EXECUTE now(5)')).rowCount).toBe(2)
  expect(await payoutIds()).toEqual([1, 6])
})
