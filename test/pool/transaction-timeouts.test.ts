import pg from 'pg'
import { beforeAll, describe, expect, test } from 'vitest'
import { waitFor } from '../e2e/support/wait.js'
import { queryOnce } from '../support/database.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { notesPool } from './support.js'

// limits.queryTimeoutMs and idleTransactionTimeoutMs in transaction mode, over one server
// connection: whatever a cut client leaves on it is what the next client would get.
const pool = notesPool('pool_txn_timeouts', 1, {
  queryTimeoutMs: 1500,
  idleTransactionTimeoutMs: 1500,
})
const connect = () => pool.connect()

const pidOf = async (client: pg.Client): Promise<number> =>
  (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid

test('a query that outlives queryTimeoutMs in a transaction: 57014, its backend is not lent again', async () => {
  const client = await connect()
  await client.query('BEGIN')
  const pid = await pidOf(client)
  expect(await sqlstateOf(client.query('SELECT pg_sleep(30)'))).toBe('57014')
  const next = await connect()
  expect(await pidOf(next)).not.toBe(pid)
  await next.end()
})

test('outside a transaction block: 08007, the outcome is unknown; the pool serves the next client', async () => {
  const client = await connect()
  expect(await sqlstateOf(client.query('SELECT pg_sleep(30)'))).toBe('08007')
  const next = await connect()
  expect((await next.query('SELECT 1 AS v')).rows).toEqual([{ v: 1 }])
  await next.end()
})

test('idle in a transaction: 25P03, rolled back and reset before the connection is lent again', async () => {
  const client = await connect()
  await client.query('BEGIN')
  await client.query('INSERT INTO notes VALUES (1)')
  await client.query('SET LOCAL app.fencing_token = 5')
  const failure = new Promise<string>((resolve) =>
    client.once('error', (err: Error & { code?: string }) => resolve(err.code ?? '')),
  )
  expect(await failure).toBe('25P03')
  const next = await connect()
  expect((await next.query('SELECT count(*)::int AS n FROM notes')).rows).toEqual([{ n: 0 }])
  const token = await next.query(
    "SELECT coalesce(current_setting('app.fencing_token', true), '') AS v",
  )
  expect(token.rows).toEqual([{ v: '' }])
  await next.end()
})

test('a client waiting for the connection is not cut by the query timeout', async () => {
  const holder = await connect()
  const waiter = await connect()
  await holder.query('BEGIN')
  const waited = waiter.query('SELECT 2 AS v')
  // The holder keeps its transaction busy past the query timeout of the waiter's clock.
  await holder.query('SELECT pg_sleep(1)')
  await holder.query('SELECT pg_sleep(1)')
  await holder.query('COMMIT')
  expect((await waited).rows).toEqual([{ v: 2 }])
  await holder.end()
  await waiter.end()
})

describe('a client that keeps its connection between transactions (native relay)', () => {
  // Room to spare, so that the client keeps its connection and the native relay carries it.
  const roomy = notesPool('pool_txn_kept_commit', 2, { queryTimeoutMs: 1500 })

  beforeAll(async () => {
    // A COMMIT that takes seconds: a deferred constraint trigger sleeps at commit time.
    await queryOnce(
      roomy.databaseUrl,
      `CREATE TABLE slow (id int PRIMARY KEY);
       CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql
         AS $$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$;
       CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`,
    )
  })

  test('a named COMMIT prepared before the native relay took over, cut in flight: 08007', async () => {
    const client = await roomy.connect()
    const commit = { name: 'fin', text: 'COMMIT' }
    // Prepared (and run, to no effect) while the JavaScript relay carries the session, which
    // the native relay takes over once it has kept its connection through a transaction.
    await client.query(commit)
    const native = () => roomy.proxy.nativeSessionCount() === 1
    await waitFor(async () => native() || (await client.query('SELECT 1'), native()), {
      what: 'the native relay',
    })
    await client.query('BEGIN')
    await client.query('INSERT INTO slow VALUES (1)')
    // Bind and Execute of the named statement only: nothing in them says COMMIT.
    expect(await sqlstateOf(client.query(commit))).toBe('08007')
  })
})
