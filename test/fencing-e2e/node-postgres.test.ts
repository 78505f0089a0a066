import pg from 'pg'
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import { waitFor } from '../e2e/support/wait.js'
import { createTestDatabase, maintenanceSession } from '../support/database.js'
import { literal, parameterised, presentToken, runGcPauseScenario } from './scenario.js'
import { pgOutcome, sqlstateOf, startFencedStack, type FencedStack } from './support.js'

let stack: FencedStack
let app: pg.Client

async function connect(options: pg.ClientConfig = {}): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: stack.url, ...options })
  await client.connect()
  return client
}

const updateStatus = (client: pg.Client, status: string, id = 99) =>
  client.query('UPDATE invoices SET status = $1 WHERE id = $2', [status, id])

beforeAll(async () => {
  stack = await startFencedStack(await createTestDatabase('fencing_e2e_pg'))
  app = await connect()
})

afterAll(async () => {
  await app?.end()
  await stack?.close()
})

beforeEach(async () => {
  await app.query('RESET ALL')
  await stack.seed(99)
})

describe('the GC-pause story with node-postgres', () => {
  test('simple queries', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await app.query(presentToken(token))
      return pgOutcome(app.query(literal(write)))
    })
  })

  test('unnamed parameterised statements', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await app.query(presentToken(token))
      return pgOutcome(app.query(parameterised(write)))
    })
  })

  test('named prepared statements', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await app.query(presentToken(token))
      return pgOutcome(app.query({ name: `story-${write.kind}`, ...parameterised(write) }))
    })
  })
})

describe('session tokens follow PostgreSQL rules through the proxy', () => {
  test('startup options set the token, in the URL and in the options field', async () => {
    const fromUrl = new pg.Client({
      connectionString: `${stack.url}?options=${encodeURIComponent('-c app.fencing_token=105')}`,
    })
    await fromUrl.connect()
    const fromOptions = await connect({ options: '-c app.fencing_token=104' })
    try {
      expect((await updateStatus(fromUrl, 'URL')).rowCount).toBe(1)
      expect(await stack.invoice(99)).toEqual({ status: 'URL', fencing_token: '105' })
      expect(await sqlstateOf(updateStatus(fromOptions, 'OPTIONS'))).toBe('PF409')
      expect(await stack.invoice(99)).toEqual({ status: 'URL', fencing_token: '105' })
    } finally {
      await fromUrl.end()
      await fromOptions.end()
    }
  })

  test('SET LOCAL holds for its transaction only', async () => {
    await app.query('BEGIN')
    await app.query('SET LOCAL app.fencing_token = 110')
    await updateStatus(app, 'LOCAL')
    await app.query('COMMIT')
    expect(await stack.invoice(99)).toEqual({ status: 'LOCAL', fencing_token: '110' })
    expect(await sqlstateOf(updateStatus(app, 'AFTER'))).toBe('PF428')
  })

  test('set_config sets a session token, or a local one that ends with the transaction', async () => {
    await app.query("SELECT set_config('app.fencing_token', '111', false)")
    await updateStatus(app, 'SESSION')
    expect(await stack.invoice(99)).toEqual({ status: 'SESSION', fencing_token: '111' })
    await app.query('BEGIN')
    await app.query("SELECT set_config('app.fencing_token', '112', true)")
    await updateStatus(app, 'LOCAL')
    await app.query('COMMIT')
    expect(await stack.invoice(99)).toEqual({ status: 'LOCAL', fencing_token: '112' })
    expect(await sqlstateOf(updateStatus(app, 'BACK TO 111'))).toBe('PF409')
  })

  test('RESET and DISCARD ALL take the token away', async () => {
    await app.query('SET app.fencing_token = 120')
    await app.query('RESET app.fencing_token')
    expect(await sqlstateOf(updateStatus(app, 'RESET'))).toBe('PF428')
    await app.query('SET app.fencing_token = 121')
    await app.query('DISCARD ALL')
    expect(await sqlstateOf(updateStatus(app, 'DISCARD'))).toBe('PF428')
    expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '100' })
  })

  test('a SET inside a rolled-back transaction is undone', async () => {
    await app.query('SET app.fencing_token = 130')
    await app.query('BEGIN')
    await app.query('SET app.fencing_token = 140')
    await app.query('ROLLBACK')
    await updateStatus(app, 'AFTER ROLLBACK')
    expect(await stack.invoice(99)).toEqual({ status: 'AFTER ROLLBACK', fencing_token: '130' })
  })
})

describe('the token is read when a statement executes', () => {
  test('a named statement prepared under 999 runs under the token current at each execution', async () => {
    const named = (status: string) =>
      app.query({
        name: 'late-token',
        text: 'UPDATE invoices SET status = $1 WHERE id = $2',
        values: [status, 99],
      })
    await app.query('SET app.fencing_token = 999')
    // More than five executions, so that PostgreSQL settles on a generic plan.
    for (let run = 0; run < 7; run++) expect((await named(`RUN ${run}`)).rowCount).toBe(1)
    expect(await stack.invoice(99)).toEqual({ status: 'RUN 6', fencing_token: '999' })
    await app.query('SET app.fencing_token = 1001')
    await named('AT 1001')
    expect(await stack.invoice(99)).toEqual({ status: 'AT 1001', fencing_token: '1001' })
    await app.query('SET app.fencing_token = 999')
    expect(await sqlstateOf(named('BACK AT 999'))).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({ status: 'AT 1001', fencing_token: '1001' })
  })
})

describe('comment tokens', () => {
  test('a leading comment overrides a stale session token, simple protocol', async () => {
    await app.query('SET app.fencing_token = 50')
    await app.query("/*fencing_token='150'*/ UPDATE invoices SET status = 'LEADING' WHERE id = 99")
    expect(await stack.invoice(99)).toEqual({ status: 'LEADING', fencing_token: '150' })
  })

  test('a trailing sqlcommenter comment among other pairs, extended protocol', async () => {
    await app.query('SET app.fencing_token = 5000')
    const text =
      "UPDATE invoices SET status = $1 WHERE id = $2 /*action='pay',fencing_token='151',framework='express'*/"
    await app.query(text, ['TRAILING', 99])
    expect(await stack.invoice(99)).toEqual({ status: 'TRAILING', fencing_token: '151' })
    expect(await sqlstateOf(app.query(text.replace("'151'", "'149'"), ['STALE', 99]))).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({ status: 'TRAILING', fencing_token: '151' })
  })

  test('a line comment carries a token; a string literal that looks like one does not', async () => {
    await app.query('UPDATE invoices SET status = $1 WHERE id = $2 -- fencing_token=152\n', [
      'LINE',
      99,
    ])
    expect(await stack.invoice(99)).toEqual({ status: 'LINE', fencing_token: '152' })
    const lookalike = "UPDATE invoices SET status = '/*fencing_token=153*/' WHERE id = 99"
    expect(await sqlstateOf(app.query(lookalike))).toBe('PF428')
  })

  test('tokens beyond 2^53 are compared exactly', async () => {
    await stack.seed(99, '9007199254740992')
    const withToken = (token: string) =>
      `/*fencing_token='${token}'*/ UPDATE invoices SET status = $1 WHERE id = $2`
    await app.query(withToken('9007199254740993'), ['ABOVE', 99])
    expect(await stack.invoice(99)).toEqual({ status: 'ABOVE', fencing_token: '9007199254740993' })
    // As doubles the two tokens are equal; as 64-bit integers the incoming one is stale.
    expect(await sqlstateOf(app.query(withToken('9007199254740992'), ['BELOW', 99]))).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({ status: 'ABOVE', fencing_token: '9007199254740993' })
  })
})

describe('named statements, whose usual token check is inline', () => {
  const named = (sql: string, values: unknown[]) => app.query({ name: sql, text: sql, values })
  const update = (status: string) =>
    named('UPDATE invoices SET status = $1 WHERE id = $2', [status, 99])

  test('every session token is judged as the helpers judge it', async () => {
    await stack.seed(99, '102')
    for (const [token, code] of [
      ['abc', 'PF400'],
      ['-5', 'PF400'],
      [' 103', 'PF400'],
      ['99999999999999999999', 'PF400'],
      ['', 'PF428'],
      ['101', 'PF409'],
    ]) {
      await app.query(`SET app.fencing_token = '${token}'`)
      expect(await sqlstateOf(update(token))).toBe(code)
    }
    expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '102' })
    // 19 digits take the helpers' path: compared exactly all the same.
    await app.query("SET app.fencing_token = '1000000000000000001'")
    await update('HUGE')
    await app.query("SET app.fencing_token = '1000000000000000000'")
    expect(await sqlstateOf(update('LOWER'))).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({
      status: 'HUGE',
      fencing_token: '1000000000000000001',
    })
  })

  test('a stale named DELETE is refused and the row survives', async () => {
    await stack.seed(99, '102')
    await app.query('SET app.fencing_token = 101')
    const remove = () => named('DELETE FROM invoices WHERE id = $1', [99])
    expect(await sqlstateOf(remove())).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '102' })
    await app.query('SET app.fencing_token = 102')
    expect((await remove()).rowCount).toBe(1)
  })
})

describe('standard_conforming_strings', () => {
  // With it off, `\'` ends a plain literal for pgfence's lexer but not for the server.
  test('a session that turns it off is closed with 0A000', async () => {
    const client = await connect()
    const closed = new Promise((resolve) => client.on('error', resolve))
    const set = client.query('SET standard_conforming_strings = off')
    expect(await sqlstateOf(set)).toBe('0A000')
    await closed
  })

  test('a session that starts with it off is refused at login', async () => {
    const client = new pg.Client({
      connectionString: stack.url,
      options: '-c standard_conforming_strings=off',
    })
    expect(await sqlstateOf(client.connect())).toBe('0A000')
  })

  test('setting it on again is fine', async () => {
    const client = await connect()
    await client.query('SET standard_conforming_strings = on')
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await client.end()
  })
})

describe('transactions and multi-statement queries', () => {
  test('PF409 aborts an explicit transaction: COMMIT reports ROLLBACK and nothing lands', async () => {
    await stack.seed(99, '102')
    await app.query('BEGIN')
    await app.query('SET LOCAL app.fencing_token = 101')
    await app.query("INSERT INTO invoices (id, status) VALUES (500, 'NEW')")
    expect(await sqlstateOf(updateStatus(app, 'LATE'))).toBe('PF409')
    expect(await sqlstateOf(app.query('SELECT 1'))).toBe('25P02')
    expect((await app.query('COMMIT')).command).toBe('ROLLBACK')
    expect(await stack.invoice(500)).toBeUndefined()
    expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '102' })
  })

  const multi = `UPDATE invoices SET status = 'MULTI' WHERE id = 99;
    SELECT id, status FROM invoices ORDER BY id;
    DELETE FROM invoices WHERE id = 98`

  async function perStatement(client: pg.Client) {
    const results = (await client.query(multi)) as unknown as pg.QueryResult[]
    return results.map(({ command, rowCount, rows }) => ({ command, rowCount, rows }))
  }

  test('each statement of a multi-statement query is fenced and answers as without pgfence', async () => {
    await stack.seed(98)
    const direct = new pg.Client({ connectionString: stack.db.url, ...maintenanceSession })
    await direct.connect()
    try {
      const unfenced = await perStatement(direct)
      await stack.seed(98)
      await stack.seed(99)
      await app.query('SET app.fencing_token = 101')
      expect(await perStatement(app)).toEqual(unfenced)
      expect(await stack.invoice(99)).toEqual({ status: 'MULTI', fencing_token: '101' })
      expect(await stack.invoice(98)).toBeUndefined()
    } finally {
      await direct.end()
    }
  })

  test('a stale statement in a multi-statement query rolls back the ones before it', async () => {
    await stack.seed(98, '200')
    await app.query('SET app.fencing_token = 101')
    expect(await sqlstateOf(app.query(multi))).toBe('PF409')
    expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '100' })
    expect(await stack.invoice(98)).toEqual({ status: 'PENDING', fencing_token: '200' })
  })
})

describe('pass-through', () => {
  test('statements that touch no fenced table reach PostgreSQL byte for byte', async () => {
    await app.query('CREATE TABLE IF NOT EXISTS invoices_archive (id int, status text)')
    const texts = [
      "SELECT   current_query() AS q /* odd\n\t comment, fencing_token='7' */ -- tail\n",
      "  SELECT current_query() AS q, 'é ✓ invoices' AS s ;  ",
      "INSERT INTO invoices_archive VALUES (1, 'x') RETURNING current_query() AS q",
    ]
    // A comment token is the one addition: the statement marker the fence triggers read.
    const upstream = (text: string) =>
      text.includes("fencing_token='7'") ? `/*pgfence:token='7'*/ ${text}` : text
    for (const text of texts) {
      expect((await app.query(text)).rows[0].q).toBe(upstream(text))
      expect(
        (await app.query(text.replaceAll("'x'", '$1'), text.includes("'x'") ? ['x'] : [])).rows[0]
          .q,
      ).toBe(upstream(text.replaceAll("'x'", '$1')))
    }
  })

  test('a fenced write reaches PostgreSQL as written, behind the marker of its comment token', async () => {
    await app.query('SET app.fencing_token = 101')
    const text = "UPDATE invoices SET status = 'SEEN' WHERE id = 99 RETURNING current_query() AS q"
    expect((await app.query(text)).rows[0].q).toBe(text)
    // An UPDATE with a comment token also sets the fence column to it, for the trigger.
    const commented = await app.query(`${text} /*fencing_token='102'*/`)
    expect(commented.rows[0].q).toMatch(
      /^\/\*pgfence:token='102'\*\/ UPDATE invoices SET "fencing_token" = '102', status/,
    )
    expect(await stack.invoice(99)).toEqual({ status: 'SEEN', fencing_token: '102' })
  })
})

describe('rejection log', () => {
  test('each rejection is logged at info with code, table, both tokens and connection id', async () => {
    await stack.seed(99, '102')
    await app.query('SET app.fencing_token = 101')
    expect(await sqlstateOf(updateStatus(app, 'LATE'))).toBe('PF409')
    const isRejection = (record: Record<string, unknown>) =>
      record.msg === 'fencing rejection' && record.code === 'PF409'
    await waitFor(() => stack.logRecords.some(isRejection), { what: 'the rejection log line' })
    expect(stack.logRecords.find(isRejection)).toMatchObject({
      level: 30,
      code: 'PF409',
      table: 'invoices',
      conn: expect.any(Number),
      incoming: '101',
      committed: '102',
    })
  })
})

describe('maintenance', () => {
  test('a superuser writes with no token under pgfence.maintenance; each switch is logged', async () => {
    await stack.seed(99, '102')
    await app.query('BEGIN')
    await app.query('SET LOCAL pgfence.maintenance = on')
    expect(await sqlstateOf(updateStatus(app, 'REPAIRED'))).toBe('ok')
    await app.query('COMMIT')
    expect(await stack.invoice(99)).toEqual({ status: 'REPAIRED', fencing_token: '102' })
    const isMaintenance = (record: Record<string, unknown>) =>
      record.msg === 'pgfence.maintenance statement' &&
      record.statement === 'SET LOCAL pgfence.maintenance = on'
    for (let round = 0; round < 2; round++) {
      await app.query("SELECT set_config('pgfence.maintenance', 'off', false)")
    }
    await waitFor(
      () => stack.logRecords.filter((r) => String(r.statement).includes('set_config')).length === 2,
      { what: 'one log line per maintenance statement, also when repeated' },
    )
    expect(stack.logRecords.find(isMaintenance)).toMatchObject({
      level: 30,
      conn: expect.any(Number),
    })
  })
})
