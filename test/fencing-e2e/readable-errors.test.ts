import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { withoutOwnContext } from '../../src/fencing/readable-errors.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { createTestDatabase } from '../support/database.js'
import { startFencedStack, type FencedStack } from './support.js'

describe('withoutOwnContext', () => {
  test("drops pgfence's function lines and the statements they ran, keeps the user's", () => {
    const context = [
      'PL/pgSQL function pgfence.refuse(text,text,text,text,text,text) line 12 at RAISE',
      `SQL statement "SELECT pgfence.refuse('PF409', 'stale fencing token',`,
      "    'incoming token ' || incoming,",
      '    rel, col)"',
      'PL/pgSQL function pgfence.stale(bigint,bigint,text,text) line 3 at PERFORM',
      'SQL statement "UPDATE invoices SET status = \'PAID\' WHERE id = i"',
      'PL/pgSQL function pay(integer) line 3 at SQL statement',
    ].join('\n')
    expect(withoutOwnContext(context)).toBe(
      [
        'SQL statement "UPDATE invoices SET status = \'PAID\' WHERE id = i"',
        'PL/pgSQL function pay(integer) line 3 at SQL statement',
      ].join('\n'),
    )
    expect(withoutOwnContext('PL/pgSQL function pgfence.token(text) line 3 at RETURN')).toBe('')
  })
})

describe('a PF error through pgfence', () => {
  let stack: FencedStack

  beforeAll(async () => {
    stack = await startFencedStack(await createTestDatabase('readable_errors'))
    await stack.seed(99, '100')
    await stack.admin.query(`
      CREATE FUNCTION take_lead(token bigint) RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pgfence.raise_fence('billing', token);
      END $$`)
  })

  afterAll(async () => stack?.close())

  test('keeps message, DETAIL, HINT and table fields, and no CONTEXT of pgfence', async () => {
    const client = new pg.Client({ connectionString: stack.url })
    await client.connect()
    try {
      await client.query('SET app.fencing_token = 50')
      const err = await client
        .query("UPDATE invoices SET status = 'PAID' WHERE id = 99")
        .catch((e: pg.DatabaseError) => e)
      expect(err).toMatchObject({
        code: 'PF409',
        message: 'stale fencing token',
        detail: expect.stringMatching(/^incoming token 50 is lower than the committed token 100/),
        hint: expect.stringContaining('re-acquire the lock'),
        schema: 'public',
        table: 'invoices',
        column: 'fencing_token',
      })
      expect((err as pg.DatabaseError).where).toBeUndefined()
      // The session goes on: the replaced message kept the stream in step.
      expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    } finally {
      await client.end()
    }
  })

  test('PF428 hints: the trigger names the session setting only, pgfence the comment too', async () => {
    const update = "UPDATE invoices SET status = 'PAID' WHERE id = 99"
    // Straight to PostgreSQL: the fence trigger raises it, and no comment reaches it there.
    const direct = new pg.Client({ connectionString: stack.db.url })
    const proxied = new pg.Client({ connectionString: stack.url })
    await direct.connect()
    await proxied.connect()
    try {
      const raised = (await direct.query(update).catch((e) => e)) as pg.DatabaseError
      expect(raised).toMatchObject({ code: 'PF428', message: 'fencing token required' })
      expect(raised.hint).toContain('SET app.fencing_token = N')
      expect(raised.hint).toContain("SELECT set_config('app.fencing_token', 'N', false)")
      expect(raised.hint).not.toMatch(/comment|fencing_token=N/)
      // What it suggests works there.
      await direct.query("SELECT set_config('app.fencing_token', '150', false)")
      expect((await direct.query(update)).rowCount).toBe(1)

      const relayed = (await proxied.query(update).catch((e) => e)) as pg.DatabaseError
      expect(relayed).toMatchObject({ code: 'PF428', message: 'fencing token required' })
      expect(relayed.hint).toContain('SET app.fencing_token = N')
      expect(relayed.hint).toContain('/* fencing_token=N */')
      expect((await proxied.query(`/* fencing_token=160 */ ${update}`)).rowCount).toBe(1)
    } finally {
      await direct.end()
      await proxied.end()
      await stack.seed(99, '100')
    }
  })

  test("a user's own function stays in the CONTEXT", async () => {
    const client = new pg.Client({ connectionString: stack.url })
    await client.connect()
    try {
      await client.query('SELECT take_lead(10)')
      const err = (await client.query('SELECT take_lead(5)').catch((e) => e)) as pg.DatabaseError
      expect(err.code).toBe('PF409')
      expect(err.where).toBe('PL/pgSQL function take_lead(bigint) line 3 at PERFORM')
    } finally {
      await client.end()
    }
  })

  test('psql prints the three PF lines and nothing of pgfence', async () => {
    const { stderr } = await runCommand(
      pgBin('psql'),
      ['--no-psqlrc', '-X', '-At', '-d', stack.url],
      {
        input: "SET app.fencing_token = 50;\nUPDATE invoices SET status = 'PAID' WHERE id = 99;\n",
      },
    )
    const lines = stderr.trim().split('\n')
    expect(lines.map((line) => line.replace(/:.*/, ''))).toEqual(['ERROR', 'DETAIL', 'HINT'])
  })
})
