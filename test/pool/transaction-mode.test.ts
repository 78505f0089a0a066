import pg from 'pg'
import postgres from 'postgres'
import { describe, expect, test } from 'vitest'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { backendsOf } from './support.js'
import {
  cancelReachesItsBackend,
  clientsKeepTheirTokens,
  fencedPool,
  tokenOf,
  tokenRules,
} from './acceptance.js'

const POOL_SIZE = 4
const pool = fencedPool('pool_transaction', 'transaction', POOL_SIZE)
const url = () => pool.url()
const connect = () => pool.connect()

describe('transaction pooling', () => {
  test('30 clients keep their own session tokens over 4 server connections', () =>
    clientsKeepTheirTokens(pool, POOL_SIZE, 1000))

  test("PostgreSQL's rules: rollback, SET LOCAL, RESET, set_config", () => tokenRules(pool))

  test('no token is inherited by a later client, startup options are carried', async () => {
    const first = await connect()
    await first.query('SET app.fencing_token = 77')
    await first.end()
    const later = await Promise.all([...Array(POOL_SIZE)].map(() => connect()))
    for (const client of later) expect(await tokenOf(client)).toBe('')
    await Promise.all(later.map((client) => client.end()))
    const withOptions = new pg.Client({
      connectionString: url(),
      options: '-c app.fencing_token=88',
    })
    await withOptions.connect()
    for (let i = 0; i < 3; i++) expect(await tokenOf(withOptions)).toBe('88')
    await withOptions.end()
  })

  test.each([
    ['LISTEN jobs', 'LISTEN'],
    ['SELECT pg_advisory_lock(1)', 'session advisory locks'],
    ['DECLARE c CURSOR WITH HOLD FOR SELECT 1', 'WITH HOLD'],
    ['CREATE TEMP TABLE scratch (x int)', 'temporary tables'],
    ['CREATE TEMP VIEW scratch AS SELECT 1', 'temporary views, sequences and functions'],
    ['CREATE FUNCTION pg_temp.scratch() RETURNS int LANGUAGE sql AS $$SELECT 1$$', 'functions'],
  ])('%s is refused with 0A000, DETAIL and HINT, and no CONTEXT', async (sql, feature) => {
    const client = await connect()
    const err = (await client.query(sql).catch((e) => e)) as pg.DatabaseError
    expect(err).toMatchObject({
      code: '0A000',
      message: expect.stringContaining(feature),
      detail: expect.stringContaining('would stay on the server connection'),
      hint: expect.any(String),
    })
    // The DO block that raised it is pgfence's, not the client's.
    expect(err.where).toBeUndefined()
    expect((await client.query('SELECT 1 AS one')).rows[0].one).toBe(1)
    await client.end()
  })

  test("a 0A000 of the client's own keeps its CONTEXT", async () => {
    const client = await connect()
    const raise = `RAISE EXCEPTION USING ERRCODE = '0A000', MESSAGE = 'LISTEN not supported in transaction pooling mode'`
    await client.query(`CREATE OR REPLACE FUNCTION refuse_like_pgfence() RETURNS void
      LANGUAGE plpgsql AS $$BEGIN ${raise}; END$$`)
    const fromFunction = client.query('SELECT refuse_like_pgfence()')
    await expect(fromFunction).rejects.toMatchObject({
      where: 'PL/pgSQL function refuse_like_pgfence() line 1 at RAISE',
    })
    const fromBlock = client.query(`DO $$BEGIN ${raise.replace('LISTEN', 'NOTIFY')}; END$$`)
    await expect(fromBlock).rejects.toMatchObject({
      where: 'PL/pgSQL function inline_code_block line 1 at RAISE',
    })
    await client.end()
  })

  test('psql prints the refusal as ERROR, DETAIL and HINT', async () => {
    const { stderr } = await runCommand(pgBin('psql'), ['-X', '-At', '-d', url()], {
      input: 'LISTEN jobs;\n',
    })
    const lines = stderr.trim().split('\n')
    expect(lines.map((line) => line.replace(/:.*/, ''))).toEqual(['ERROR', 'DETAIL', 'HINT'])
  })

  test('a refusal reaches a client whose encoding is not UTF-8 as it is', async () => {
    const { stderr } = await runCommand(pgBin('psql'), ['-X', '-At', '-d', url()], {
      input: 'BEGIN;\nDECLARE c CURSOR WITH HOLD FOR SELECT 1;\n',
      env: { PGCLIENTENCODING: 'EUC_JP' },
    })
    expect(stderr).toContain('ERROR:  DECLARE ... WITH HOLD not supported in transaction pooling')
  })

  test('a temporary table dropped at commit works', async () => {
    const client = await connect()
    await client.query('BEGIN')
    await client.query('CREATE TEMP TABLE scratch (x int) ON COMMIT DROP')
    await client.query('INSERT INTO scratch VALUES (1)')
    await client.query('COMMIT')
    await client.end()
  })

  test('200 clients with queries in flight are all answered by at most 4 backends', async () => {
    const clients = await Promise.all([...Array(200)].map(() => connect()))
    const answers = await Promise.all(
      clients.map(async (client, i) => {
        const { rows } = await client.query('SELECT $1::int AS n, pg_sleep(0.01)', [i])
        return rows[0].n
      }),
    )
    expect(answers).toEqual([...Array(200).keys()])
    expect(await backendsOf(pool.database)).toBeLessThanOrEqual(POOL_SIZE)
    await Promise.all(clients.map((client) => client.end()))
  })

  test('postgres.js (named statements), psql and pgbench -M prepared work', async () => {
    const sql = postgres(url(), { max: 6 })
    const values = await Promise.all(
      [...Array(20).keys()].map(async (i) => (await sql`SELECT ${i}::int AS v`)[0].v),
    )
    expect(values).toEqual([...Array(20).keys()])
    await sql.end()
    const psql = await runCommand(pgBin('psql'), ['-X', '-At', '-d', url(), '-c', 'SELECT 42'])
    expect(psql).toMatchObject({ code: 0, stdout: '42\n' })
    const bench = await runCommand(
      pgBin('pgbench'),
      ['-n', '-M', 'prepared', '-c', '6', '-j', '6', '-T', '2', '-f', '-', url()],
      { input: 'SELECT 1;\n', env: { PGCONNECT_TIMEOUT: '5' } },
    )
    expect(bench.stderr).toBe('')
    expect(bench.stdout).toMatch(/number of failed transactions: 0 /)
  })

  test('a cancel request reaches the backend running the client transaction', () =>
    cancelReachesItsBackend(pool))

  test('a wrong password is refused by pgfence with 28P01', async () => {
    const client = new pg.Client({ connectionString: pool.url('nope') })
    await expect(client.connect()).rejects.toMatchObject({ code: '28P01' })
  })
})
