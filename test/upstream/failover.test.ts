import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { waitFor } from '../e2e/support/wait.js'
import { queryOnce } from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { startReplicaPair, type ReplicaPair } from '../support/replica-pair.js'

async function setReadOnly(url: string, value: 'on' | 'off'): Promise<void> {
  await queryOnce(url, `ALTER SYSTEM SET default_transaction_read_only = ${value}`)
  await queryOnce(url, 'SELECT pg_reload_conf()')
}

/** Each pool mode over its own primary/standby pair (a failover goes one way). */
describe.each(['none', 'session', 'transaction'] as const)('pool.mode %s', (mode) => {
  let pair: ReplicaPair
  let proxy: TestProxy

  beforeAll(async () => {
    pair = await startReplicaPair(`failover-${mode}`)
    await queryOnce(pair.primary.url, 'CREATE TABLE ledger (id serial PRIMARY KEY, note text)')
    const pooling = mode === 'none' ? {} : { pool: { mode }, auth: { file: writeUserlist() } }
    proxy = await startTestProxy(
      {
        ...pooling,
        upstream: {
          hosts: [pair.primary.hostPort, pair.standby.hostPort],
          primaryCheckIntervalMs: 100,
          connectTimeoutMs: 8000,
        },
        admin: { listen: { port: 0 }, users: ['postgres'] },
      },
      pair.primary.url,
    )
  }, 60_000)

  afterAll(async () => {
    await proxy?.close()
    await pair?.remove()
  })

  const url = (database?: string) =>
    proxy.url('postgres', database, mode === 'none' ? undefined : POOL_PASSWORD)

  async function get(path: string): Promise<{ status: number; body: string }> {
    const response = await fetch(`http://127.0.0.1:${proxy.adminPort}${path}`)
    return { status: response.status, body: await response.text() }
  }

  const metric = async (line: string) =>
    (await get('/metrics')).body.split('\n').find((l) => l.startsWith(`${line} `))

  /** Writes one row through pgfence and says which node's port took it. */
  async function writeThrough(note: string): Promise<number> {
    const { rows } = await queryOnce(
      url(),
      `INSERT INTO ledger (note) VALUES ('${note}') RETURNING inet_server_port() AS port`,
    )
    return rows[0].port
  }

  /** A session through pgfence in a transaction, with the first error it is sent while idle. */
  async function openTransaction(): Promise<{
    client: pg.Client
    ended: Promise<Error & { code?: string }>
  }> {
    const client = new pg.Client({ connectionString: url() })
    const ended = new Promise<Error & { code?: string }>((resolve) => client.on('error', resolve))
    await client.connect()
    await client.query('BEGIN')
    await client.query(`INSERT INTO ledger (note) VALUES ('in flight')`)
    return { client, ended }
  }

  /** SHOW SERVERS of the admin console: the host column of each server connection. */
  async function serverHosts(): Promise<string[]> {
    const { rows } = await queryOnce(url('pgfence'), 'SHOW SERVERS')
    return rows.map((row) => row.host)
  }

  test('pgfence follows the primary through a failover without a restart', async () => {
    await waitFor(async () => (await get('/readyz')).status === 200, { what: 'a primary' })
    const primaryGauge = `pgfence_upstream_primary{host="${pair.primary.hostPort}"}`
    const standbyGauge = `pgfence_upstream_primary{host="${pair.standby.hostPort}"}`
    expect(await metric(primaryGauge)).toBe(`${primaryGauge} 1`)
    expect(await metric(standbyGauge)).toBe(`${standbyGauge} 0`)
    expect(await writeThrough('before')).toBe(pair.primary.port)

    const held = await openTransaction()
    expect(await serverHosts()).toContain(pair.primary.hostPort)
    await pair.primary.crash()
    // The session on the lost primary ends honestly: its transaction certainly did not commit.
    expect((await held.ended).code).toBe('08006')
    await held.client.end().catch(() => {})
    await waitFor(async () => (await get('/readyz')).status === 503, { what: 'readyz 503' })

    // A login while there is no primary waits for the next one instead of failing.
    const late = new pg.Client({ connectionString: url() })
    const lateLogin = late.connect()
    await pair.standby.promote()
    await lateLogin
    try {
      await late.query('BEGIN')
      const { rows } = await late.query('SELECT inet_server_port() AS port')
      expect(rows[0].port).toBe(pair.standby.port)
      expect(await serverHosts()).toEqual([pair.standby.hostPort])
      await late.query('COMMIT')
    } finally {
      await late.end()
    }

    expect(await writeThrough('after')).toBe(pair.standby.port)
    expect((await get('/readyz')).status).toBe(200)
    expect(await metric(standbyGauge)).toBe(`${standbyGauge} 1`)
    expect(await metric(primaryGauge)).toBe(`${primaryGauge} 0`)
    expect(await metric('pgfence_failovers_total')).toBe('pgfence_failovers_total 1')
    const { rows } = await queryOnce(url(), 'SELECT note FROM ledger ORDER BY id')
    expect(rows.map((row) => row.note)).toEqual(['before', 'after'])
  })

  test('sessions on a node that turns read-only are ended by pgfence (08006, 08007 with a statement that may commit in flight); none is a failover', async () => {
    const held = await openTransaction()
    // A statement outside a transaction block may commit on its own: its outcome is unknown.
    const busy = new pg.Client({ connectionString: url() })
    busy.on('error', () => {})
    await busy.connect()
    const running = busy.query('SELECT pg_sleep(30)').then(
      () => null,
      (err: Error & { code?: string }) => err.code,
    )
    await waitFor(
      async () =>
        (
          await queryOnce(
            pair.standby.url,
            "SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'",
          )
        ).rowCount === 1,
      { what: 'the statement to run' },
    )
    await setReadOnly(pair.standby.url, 'on')
    expect((await held.ended).code).toBe('08006')
    expect(await running).toBe('08007')
    await held.client.end().catch(() => {})
    await busy.end().catch(() => {})
    expect((await get('/readyz')).status).toBe(503)
    await setReadOnly(pair.standby.url, 'off')
    await waitFor(async () => (await get('/readyz')).status === 200, { what: 'the primary back' })
    expect(await writeThrough('again')).toBe(pair.standby.port)
    expect(await metric('pgfence_failovers_total')).toBe('pgfence_failovers_total 1')
  })
})
