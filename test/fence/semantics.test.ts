import pg from 'pg'
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import { EPOCH_TAG } from '../../src/schema/token-layout.js'
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

const row99 = async (): Promise<{ status: string; fencing_token: string }> =>
  (await admin.query('SELECT status, fencing_token FROM invoices WHERE id = 99')).rows[0]

const nextToken = async (): Promise<bigint> =>
  BigInt((await admin.query('SELECT pgfence.next_token()::text AS token')).rows[0].token)

/**
 * Runs `writes` in one transaction of `app`; returns how often they called pgfence.check_row.
 * The view also holds calls of earlier transactions not yet reported (at most once a second):
 * the count is the difference across the writes, inside one transaction, where none is.
 */
async function checkRowCalls(writes: () => Promise<void>): Promise<number> {
  const calls = async (): Promise<number> =>
    (
      await app.query(`SELECT coalesce(sum(calls), 0)::int AS calls
        FROM pg_stat_xact_user_functions WHERE schemaname = 'pgfence' AND funcname = 'check_row'`)
    ).rows[0].calls
  await app.query('BEGIN')
  try {
    await app.query("SET LOCAL track_functions = 'pl'")
    const before = await calls()
    await writes()
    return (await calls()) - before
  } finally {
    await app.query('COMMIT')
  }
}

beforeAll(async () => {
  db = await createTestDatabase('fence_semantics')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(invoicesSql)
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
  await app.query('RESET ALL')
})

describe('the GC-pause scenario', () => {
  test('101 and 102 commit, a late 101 is PF409 and keeps 102, 102 again commits', async () => {
    await app.query('SET app.fencing_token = 101')
    await app.query("UPDATE invoices SET status = 'W1' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'W1', fencing_token: '101' })
    await app.query('SET app.fencing_token = 102')
    await app.query("UPDATE invoices SET status = 'W2' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'W2', fencing_token: '102' })
    await app.query('SET app.fencing_token = 101')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'LATE' WHERE id = 99"))).toBe(
      'PF409',
    )
    expect(await row99()).toEqual({ status: 'W2', fencing_token: '102' })
    await app.query('SET app.fencing_token = 102')
    const again = await app.query("UPDATE invoices SET status = 'W2b' WHERE id = 99")
    expect(again.rowCount).toBe(1)
    expect(await row99()).toEqual({ status: 'W2b', fencing_token: '102' })
  })

  test('no token is PF428 for a row the statement would write; no row written, no error', async () => {
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'X' WHERE id = 99"))).toBe(
      'PF428',
    )
    expect(await sqlstateOf(app.query('DELETE FROM invoices WHERE id = 99'))).toBe('PF428')
    expect((await app.query("UPDATE invoices SET status = 'X' WHERE id = -5")).rowCount).toBe(0)
    expect((await app.query('DELETE FROM invoices WHERE id = -5')).rowCount).toBe(0)
    expect(await row99()).toEqual({ status: 'PENDING', fencing_token: '100' })
  })

  test('a stale DELETE is PF409 and the row survives; a current one deletes it', async () => {
    await app.query('SET app.fencing_token = 99')
    expect(await sqlstateOf(app.query('DELETE FROM invoices WHERE id = 99'))).toBe('PF409')
    expect(await row99()).toEqual({ status: 'PENDING', fencing_token: '100' })
    await app.query('SET app.fencing_token = 100')
    expect((await app.query('DELETE FROM invoices WHERE id = 99')).rowCount).toBe(1)
    expect(await row99()).toBeUndefined()
  })

  test('rows the statement does not match never reject it', async () => {
    await admin.query(
      "INSERT INTO invoices (id, status, fencing_token) VALUES (7, 'HIGH', 500) ON CONFLICT (id) DO UPDATE SET fencing_token = 500",
    )
    await app.query('SET app.fencing_token = 101')
    await app.query("UPDATE invoices SET status = 'OK' WHERE id = 99")
    expect(
      (
        await app.query(
          'DELETE FROM invoices WHERE id IN (SELECT id FROM invoices WHERE status = $1)',
          ['OK'],
        )
      ).rowCount,
    ).toBe(1)
    expect(
      (await admin.query('SELECT fencing_token FROM invoices WHERE id = 7')).rows[0].fencing_token,
    ).toBe('500')
    await admin.query('DELETE FROM invoices WHERE id = 7')
  })
})

describe('errors', () => {
  test('PF409 carries the tokens in DETAIL, a HINT and the schema, table and column', async () => {
    await app.query('SET app.fencing_token = 99')
    const err = await app
      .query("UPDATE invoices SET status = 'X' WHERE id = 99")
      .catch((e: unknown) => e)
    expect(err).toMatchObject({
      code: 'PF409',
      message: 'stale fencing token',
      detail: 'incoming token 99 is lower than the committed token 100 of table public.invoices',
      schema: 'public',
      table: 'invoices',
      column: 'fencing_token',
    })
    expect((err as { hint?: string }).hint).toMatch(/re-acquire the lock/)
  })

  test.each(['-1', '1.5', 'abc', '9223372036854775808', ''])('token %j is PF400', async (token) => {
    await app.query(`SELECT set_config('app.fencing_token', '${token || 'x y'}', false)`)
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'X' WHERE id = 99"))).toBe(
      'PF400',
    )
  })

  test('a comment token cannot inject SQL: it is a literal, and PF400', async () => {
    const sql =
      "UPDATE invoices SET status = 'X' WHERE id = 99 /*fencing_token='1%27)%3B%20DROP%20TABLE%20invoices%3B%20--'*/"
    expect(await sqlstateOf(app.query(sql))).toBe('PF400')
    expect(await row99()).toEqual({ status: 'PENDING', fencing_token: '100' })
  })

  test("an invalid comment token's DETAIL names the comment, not the marker's stand-in", async () => {
    const err = await app
      .query("UPDATE invoices SET status = 'X' WHERE id = 99 /*fencing_token='abc'*/")
      .catch((e: unknown) => e as { code?: string; detail?: string })
    expect(err).toMatchObject({
      code: 'PF400',
      detail:
        "fencing token in the statement's comment is not an integer in [0, 9223372036854775807]",
    })
  })

  // Every outcome of a comment token, for UPDATE and DELETE alike.
  test.each([
    ['an equal token', '100', 'commits', '100'],
    ['a higher token', '101', 'commits', '101'],
    ['a lower token', '99', 'PF409', '100'],
    ['the highest 18-digit token', '999999999999999999', 'commits', '999999999999999999'],
    ['the highest token (19 digits)', '9223372036854775807', 'commits', '9223372036854775807'],
    ['a token above 2^63-1', '9223372036854775808', 'PF400', '100'],
    ['a negative token', '-5', 'PF400', '100'],
  ])('a comment token: %s (%s) %s', async (_, token, outcome, committed) => {
    for (const sql of [
      `UPDATE invoices SET status = 'C' WHERE id = 99 /*fencing_token='${token}'*/`,
      `DELETE FROM invoices WHERE id = 99 -- fencing_token=${token}`,
    ]) {
      await admin.query(seedInvoice99)
      const result = await sqlstateOf(app.query(sql))
      expect(result).toBe(outcome === 'commits' ? 'ok' : outcome)
      const row = await row99()
      if (outcome !== 'commits') expect(row).toEqual({ status: 'PENDING', fencing_token: '100' })
      else if (sql.startsWith('UPDATE'))
        expect(row).toEqual({ status: 'C', fencing_token: committed })
      else expect(row).toBeUndefined()
    }
  })

  test('a bad comment token is PF400', async () => {
    expect(
      await sqlstateOf(
        app.query("UPDATE invoices SET status = 'X' WHERE id = 99 /*fencing_token='abc'*/"),
      ),
    ).toBe('PF400')
  })

  test('PF409 aborts the explicit transaction: COMMIT rolls back', async () => {
    await app.query('BEGIN')
    await app.query('SET LOCAL app.fencing_token = 100')
    await app.query("UPDATE invoices SET status = 'IN-TX' WHERE id = 99")
    await app.query('SET LOCAL app.fencing_token = 50')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'STALE' WHERE id = 99"))).toBe(
      'PF409',
    )
    expect(await sqlstateOf(app.query('SELECT 1'))).toBe('25P02')
    const commit = await app.query('COMMIT')
    expect(commit.command).toBe('ROLLBACK')
    expect(await row99()).toEqual({ status: 'PENDING', fencing_token: '100' })
  })
})

describe('where the token comes from', () => {
  test('a comment token overrides the session token for that statement only', async () => {
    await app.query('SET app.fencing_token = 50')
    await app.query(
      "UPDATE invoices SET status = 'C' WHERE id = 99 /*traceparent='00-ab',fencing_token='105'*/",
    )
    expect(await row99()).toEqual({ status: 'C', fencing_token: '105' })
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'D' WHERE id = 99"))).toBe(
      'PF409',
    )
  })

  test('SET LOCAL ends with its transaction, ROLLBACK undoes SET, RESET clears it', async () => {
    await app.query('BEGIN')
    await app.query('SET LOCAL app.fencing_token = 101')
    await app.query("UPDATE invoices SET status = 'L' WHERE id = 99")
    await app.query('COMMIT')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'M' WHERE id = 99"))).toBe(
      'PF428',
    )
    await app.query('BEGIN')
    await app.query('SET app.fencing_token = 200')
    await app.query('ROLLBACK')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'M' WHERE id = 99"))).toBe(
      'PF428',
    )
    await app.query('SET app.fencing_token = 101')
    await app.query('RESET app.fencing_token')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'M' WHERE id = 99"))).toBe(
      'PF428',
    )
    expect(await row99()).toEqual({ status: 'L', fencing_token: '101' })
  })

  test('prepared statements use the token current at each execution', async () => {
    await app.query('PREPARE mark(text) AS UPDATE invoices SET status = $1 WHERE id = 99')
    await app.query('SET app.fencing_token = 101')
    await app.query("EXECUTE mark('P1')")
    await app.query('SET app.fencing_token = 103')
    await app.query("EXECUTE mark('P2')")
    expect(await row99()).toEqual({ status: 'P2', fencing_token: '103' })
    await app.query('SET app.fencing_token = 102')
    expect(await sqlstateOf(app.query("EXECUTE mark('P3')"))).toBe('PF409')
    await app.query('DEALLOCATE mark')

    const named = 'UPDATE invoices SET status = $1 WHERE id = $2'
    for (const token of [103, 104, 105, 106, 107, 108]) {
      await app.query(`SET app.fencing_token = ${token}`)
      await app.query(named, [`N${token}`, 99], 'named_mark')
    }
    expect(await row99()).toEqual({ status: 'N108', fencing_token: '108' })
    await app.query('SET app.fencing_token = 104')
    expect(await sqlstateOf(app.query(named, ['late', 99], 'named_mark'))).toBe('PF409')
  })

  test('a comment token goes on the EXECUTE: in PREPARE it is refused', async () => {
    const prepare = "PREPARE late AS UPDATE invoices SET status = 'X' WHERE id = 99"
    expect(await sqlstateOf(app.query(`${prepare} /*fencing_token='101'*/`))).toBe('PF501')
    await app.query("PREPARE mark AS UPDATE invoices SET status = 'C' WHERE id = 99")
    expect(await sqlstateOf(app.query("EXECUTE mark /*fencing_token='99'*/"))).toBe('PF409')
    await app.query("EXECUTE mark /*fencing_token='101'*/")
    expect(await row99()).toEqual({ status: 'C', fencing_token: '101' })
    expect(await sqlstateOf(app.query('EXECUTE mark'))).toBe('PF428')
    await app.query('DEALLOCATE mark')
  })

  test('INSERT without a column list: the token fills the fence column', async () => {
    await app.query('SET app.fencing_token = 105')
    await app.query("INSERT INTO invoices VALUES (7, 'N')")
    await app.query("INSERT INTO invoices VALUES (8, 'N', 3, DEFAULT), (9, 'N', 3, 105)")
    expect(await sqlstateOf(app.query("INSERT INTO invoices VALUES (10, 'N', 3, 104)"))).toBe(
      'PF501',
    )
    const rows = await admin.query(
      'SELECT id, fencing_token FROM invoices WHERE id < 99 ORDER BY id',
    )
    expect(rows.rows).toEqual([7, 8, 9].map((id) => ({ id, fencing_token: '105' })))
    await admin.query('DELETE FROM invoices WHERE id < 99')
  })

  test('tokens beyond 2^53 compare exactly', async () => {
    await app.query('SET app.fencing_token = 9007199254740993')
    await app.query("UPDATE invoices SET status = 'BIG' WHERE id = 99")
    await app.query('SET app.fencing_token = 9007199254740992')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'X' WHERE id = 99"))).toBe(
      'PF409',
    )
    expect(await row99()).toEqual({ status: 'BIG', fencing_token: '9007199254740993' })
    await app.query('SET app.fencing_token = 9223372036854775807')
    await app.query("UPDATE invoices SET status = 'MAX' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'MAX', fencing_token: '9223372036854775807' })
  })
})

describe('inserts and upserts', () => {
  test('new rows get the presented token; an upsert conflict is fenced', async () => {
    await app.query('SET app.fencing_token = 150')
    const inserted = await app.query(
      "INSERT INTO invoices (id, status) VALUES (1, 'a'), (2, 'b') RETURNING id, status",
    )
    expect(inserted.rows).toEqual([
      { id: 1, status: 'a' },
      { id: 2, status: 'b' },
    ])
    await app.query("INSERT INTO invoices (id, status) SELECT 3, 'c'")
    await app.query('INSERT INTO invoices (id, status) VALUES ($1, $2)', [4, 'd'])
    const tokens = await admin.query(
      'SELECT id, fencing_token FROM invoices WHERE id < 10 ORDER BY id',
    )
    expect(tokens.rows).toEqual([1, 2, 3, 4].map((id) => ({ id, fencing_token: '150' })))
    await app.query('SET app.fencing_token = 120')
    const upsert =
      "INSERT INTO invoices AS i (id, status) VALUES (1, 'z') ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status"
    expect(await sqlstateOf(app.query(upsert))).toBe('PF409')
    await app.query('SET app.fencing_token = 151')
    await app.query(upsert)
    expect(
      (await admin.query('SELECT status, fencing_token FROM invoices WHERE id = 1')).rows[0],
    ).toEqual({ status: 'z', fencing_token: '151' })
    await admin.query('DELETE FROM invoices WHERE id < 10')
  })
})

describe('an UPDATE with a comment token (the fence column set to it)', () => {
  const comment = (sql: string, token: string) => app.query(`${sql} /*fencing_token='${token}'*/`)

  test('raises the row to the token, keeps an equal one, refuses a lower one', async () => {
    await comment("UPDATE invoices SET status = 'A' WHERE id = 99", '150')
    expect(await row99()).toEqual({ status: 'A', fencing_token: '150' })
    await comment("UPDATE invoices SET status = 'B' WHERE id = 99", '150')
    expect(await row99()).toEqual({ status: 'B', fencing_token: '150' })
    expect(await sqlstateOf(comment("UPDATE invoices SET status = 'C' WHERE id = 99", '149'))).toBe(
      'PF409',
    )
    expect(await row99()).toEqual({ status: 'B', fencing_token: '150' })
    expect(await sqlstateOf(comment("UPDATE invoices SET status = 'C' WHERE id = 99", 'x'))).toBe(
      'PF400',
    )
  })

  test('multi-column SET in a CTE, prepared, and a row of many that is stale', async () => {
    await comment(
      "WITH u AS (UPDATE invoices SET (status, amount) = ('M', 5) WHERE id = 99 RETURNING id) SELECT count(*) FROM u",
      '160',
    )
    expect(await row99()).toEqual({ status: 'M', fencing_token: '160' })
    await app.query(
      "UPDATE invoices SET status = $1 WHERE id = $2 /*fencing_token='161'*/",
      ['P', 99],
      'comment-update',
    )
    expect(await row99()).toEqual({ status: 'P', fencing_token: '161' })
    await admin.query("INSERT INTO invoices (id, status, fencing_token) VALUES (98, 'NEW', 300)")
    try {
      const both = "UPDATE invoices SET status = 'BOTH' WHERE id IN (98, 99)"
      expect(await sqlstateOf(comment(both, '200'))).toBe('PF409')
      const rows = await admin.query('SELECT status FROM invoices WHERE id IN (98, 99) ORDER BY id')
      expect(rows.rows).toEqual([{ status: 'NEW' }, { status: 'P' }])
    } finally {
      await admin.query('DELETE FROM invoices WHERE id = 98')
    }
  })

  test('a session that has set maintenance off is fenced the same', async () => {
    await app.query('SET pgfence.maintenance = off')
    expect(await sqlstateOf(comment("UPDATE invoices SET status = 'X' WHERE id = 99", '99'))).toBe(
      'PF409',
    )
    await comment("UPDATE invoices SET status = 'Y' WHERE id = 99", '170')
    expect(await row99()).toEqual({ status: 'Y', fencing_token: '170' })
  })

  test('a direct connection may set the column only to the token it presents', async () => {
    const direct = new pg.Client({ connectionString: db.url })
    await direct.connect()
    try {
      // The marker presents 300, as SET app.fencing_token = 300 would.
      await direct.query(
        "/*pgfence:token='300'*/ UPDATE invoices SET status = 'D', fencing_token = 300 WHERE id = 99",
      )
      expect(await row99()).toEqual({ status: 'D', fencing_token: '300' })
      const other = "/*pgfence:token='301'*/ UPDATE invoices SET fencing_token = 302 WHERE id = 99"
      expect(await sqlstateOf(direct.query(other))).toBe('PF501')
      await direct.query('SET app.fencing_token = 400')
      const forged = 'UPDATE invoices SET fencing_token = 500 WHERE id = 99'
      expect(await sqlstateOf(direct.query(forged))).toBe('PF501')
      expect(await row99()).toEqual({ status: 'D', fencing_token: '300' })
    } finally {
      await direct.end()
    }
  })
})

describe("an UPDATE's token read first: the column's new value as its text, else the full check", () => {
  test('the committed token again keeps the row, written as it stands or as another text', async () => {
    await app.query('SET app.fencing_token = 100')
    await app.query("UPDATE invoices SET status = 'E' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'E', fencing_token: '100' })
    await app.query("SET app.fencing_token = '0100'")
    await app.query("UPDATE invoices SET status = 'F' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'F', fencing_token: '100' })
    await app.query("SET app.fencing_token = '099'")
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'G' WHERE id = 99"))).toBe(
      'PF409',
    )
    expect(await row99()).toEqual({ status: 'F', fencing_token: '100' })
  })

  test('a session that once set maintenance and reset it is fenced the same', async () => {
    await app.query('SET pgfence.maintenance = off')
    await app.query('RESET pgfence.maintenance')
    await app.query('SET app.fencing_token = 100')
    await app.query("UPDATE invoices SET status = 'H' WHERE id = 99")
    expect(await row99()).toEqual({ status: 'H', fencing_token: '100' })
    await app.query('SET app.fencing_token = 99')
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'I' WHERE id = 99"))).toBe(
      'PF409',
    )
    await app.query("UPDATE invoices SET status = 'J' WHERE id = 99 /*fencing_token='120'*/")
    expect(await row99()).toEqual({ status: 'J', fencing_token: '120' })
  })

  test('a direct connection: the column set to its token, or left at an equal one', async () => {
    const direct = new pg.Client({ connectionString: db.url })
    await direct.connect()
    try {
      await direct.query('SET app.fencing_token = 130')
      await direct.query("UPDATE invoices SET status = 'K', fencing_token = 130 WHERE id = 99")
      expect(await row99()).toEqual({ status: 'K', fencing_token: '130' })
      await direct.query("UPDATE invoices SET status = 'L', fencing_token = 130 WHERE id = 99")
      expect(await row99()).toEqual({ status: 'L', fencing_token: '130' })
      await direct.query("/*pgfence:token='130'*/ UPDATE invoices SET status = 'M' WHERE id = 99")
      expect(await row99()).toEqual({ status: 'M', fencing_token: '130' })
      const stale = "/*pgfence:token='129'*/ UPDATE invoices SET status = 'N' WHERE id = 99"
      expect(await sqlstateOf(direct.query(stale))).toBe('PF409')
      const other = "UPDATE invoices SET status = 'O', fencing_token = 131 WHERE id = 99"
      expect(await sqlstateOf(direct.query(other))).toBe('PF501')
      expect(await row99()).toEqual({ status: 'M', fencing_token: '130' })
    } finally {
      await direct.end()
    }
  })
})

// Every token pgfence.next_token() issues carries its timeline (from EPOCH_TAG up, 19 digits).
// The row trigger admits those of this timeline on its usual paths: check_row, which reads the
// token again and checks its timeline with a query, would cost as much again as the whole write.
describe('tokens of next_token(): the usual paths for this timeline', () => {
  test('a token of this timeline writes by SET and by comment, inserts and deletes without check_row', async () => {
    const token = await nextToken()
    const calls = await checkRowCalls(async () => {
      await app.query(`SET LOCAL app.fencing_token = ${token}`)
      await app.query("UPDATE invoices SET status = 'SET' WHERE id = 99")
      await app.query("UPDATE invoices SET status = 'SET again' WHERE id = 99")
      await app.query(
        `UPDATE invoices SET status = 'COMMENT' WHERE id = 99 /*fencing_token='${token}'*/`,
      )
      await app.query("INSERT INTO invoices (id, status) VALUES (100, 'NEW')")
      await app.query('DELETE FROM invoices WHERE id = 100')
    })
    expect(calls).toBe(0)
    expect(await row99()).toEqual({ status: 'COMMENT', fencing_token: token.toString() })
  })

  test('a token tagged with an earlier timeline than this one goes on to check_row', async () => {
    // Timeline 0 is no server's: check_row admits it (epoch_check refuses 1 to this one's - 1).
    const token = EPOCH_TAG + 5n
    const calls = await checkRowCalls(async () => {
      await app.query(`SET LOCAL app.fencing_token = ${token}`)
      await app.query("UPDATE invoices SET status = 'TIMELINE 0' WHERE id = 99")
    })
    expect(calls).toBe(1)
    expect(await row99()).toEqual({ status: 'TIMELINE 0', fencing_token: token.toString() })
  })

  test('the usual path of issued tokens refuses what check_row refuses', async () => {
    const [older, newer] = [await nextToken(), await nextToken()]
    await app.query(`SET app.fencing_token = ${newer}`)
    await app.query("UPDATE invoices SET status = 'NEWER' WHERE id = 99")
    await app.query(`SET app.fencing_token = ${older}`)
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'LATE' WHERE id = 99"))).toBe(
      'PF409',
    )
    expect(await sqlstateOf(app.query('DELETE FROM invoices WHERE id = 99'))).toBe('PF409')
    await app.query(`SET app.fencing_token = ${newer}`)
    // The fence column written around the rewrite (a function's UPDATE): not the token, PF501.
    await admin.query(`CREATE OR REPLACE FUNCTION set_token(t bigint) RETURNS void LANGUAGE sql AS
      $$ UPDATE invoices SET fencing_token = t WHERE id = 99 $$`)
    expect(await sqlstateOf(app.query(`SELECT set_token(${newer + 1n})`))).toBe('PF501')
    // 19 digits above the largest bigint: PF400, as from check_row, not the cast's 22003.
    await app.query("SET app.fencing_token = '9999999999999999999'")
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'BIG' WHERE id = 99"))).toBe(
      'PF400',
    )
    expect(await row99()).toEqual({ status: 'NEWER', fencing_token: newer.toString() })
  })
})
