import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { tokenTimeline } from '../../src/schema/token-layout.js'
import { waitFor } from '../e2e/support/wait.js'
import { invoicesSql } from '../fence/support.js'
import { capture } from '../support/capture.js'
import { scratchFile } from '../support/pool-auth.js'
import { run as migrate } from '../../src/cli/migrate.js'
import { TokenIssuer } from '../../src/lease/token-issuer.js'
import { writeFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { stringify } from 'yaml'
import { queryOnce } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { startReplicaPair, type ReplicaPair } from '../support/replica-pair.js'

let pair: ReplicaPair
let proxy: TestProxy
let migrated: { code: number; out: string }
/** The proxy's log lines: { msg, primary? }. */
const logged: { msg: string; primary?: string }[] = []
const sink = new Writable({
  write(line: Buffer, _encoding, done) {
    logged.push(JSON.parse(line.toString()) as { msg: string; primary?: string })
    done()
  },
})
const fencing = { tables: [{ name: 'invoices' }] }

beforeAll(async () => {
  pair = await startReplicaPair('epochs')
  await queryOnce(pair.primary.url, invoicesSql)
  const configFile = scratchFile('pgfence.yaml')
  writeFileSync(configFile, stringify({ fencing }))
  migrated = await capture(() =>
    migrate(['--config', configFile, '--database-url', pair.primary.url]),
  )
  proxy = await startTestProxy(
    {
      fencing,
      upstream: {
        hosts: [pair.primary.hostPort, pair.standby.hostPort],
        primaryCheckIntervalMs: 100,
        connectTimeoutMs: 8000,
      },
    },
    pair.primary.url,
    { logger: pino({ level: 'info' }, sink) },
  )
}, 60_000)

afterAll(async () => {
  await proxy?.close()
  await pair?.remove()
})

const nextToken = async (): Promise<bigint> =>
  BigInt((await queryOnce(proxy.url(), 'SELECT pgfence.next_token()::text AS t')).rows[0].t)

/** Writes invoice 99 through pgfence with `token`: its error, or null once committed. */
async function writeWith(token: bigint, status: string): Promise<pg.DatabaseError | null> {
  const client = new pg.Client({ connectionString: proxy.url() })
  await client.connect()
  try {
    await client.query(
      `/* fencing_token=${token} */ INSERT INTO invoices (id, status) VALUES (99, '${status}')
       ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status`,
    )
    return null
  } catch (err) {
    return err as pg.DatabaseError
  } finally {
    await client.end()
  }
}

test('pgfence migrate states the guarantee of asynchronous standbys', () => {
  expect(migrated.code).toBe(0)
  expect(migrated.out).toContain(
    'pgfence migrate: replication: asynchronous standbys: a failover may lose acknowledged commits',
  )
})

const primaryLines = () => logged.filter((line) => line.msg.startsWith('upstream primary'))

test('the log line of the first primary states its replication guarantee', async () => {
  await waitFor(() => primaryLines().length === 1, { what: 'the first primary' })
  expect(primaryLines()[0]).toMatchObject({
    primary: pair.primary.hostPort,
    msg: expect.stringContaining('replication: asynchronous standbys: a failover may lose'),
  })
})

test('a failover that lost commits invalidates earlier tokens; later ones exceed them all', async () => {
  // The lease library's token source, given both hosts standby first: it follows the primary.
  const issuer = TokenIssuer.from(
    `postgres://postgres@${pair.standby.hostPort},${pair.primary.hostPort}/postgres?target_session_attrs=read-write`,
    () => {},
  )
  const leased = await issuer.next()
  expect(tokenTimeline(leased)).toBe(1)
  const first = await nextToken()
  expect(first > leased).toBe(true)
  expect(await writeWith(first, 'first')).toBeNull()
  await waitFor(
    async () =>
      (await queryOnce(pair.standby.url, 'SELECT status FROM invoices WHERE id = 99')).rows[0]
        ?.status === 'first',
    { what: 'the standby to replay the first write' },
  )

  // The standby stops receiving WAL: what follows is acknowledged but lost at the failover.
  await queryOnce(pair.standby.url, "ALTER SYSTEM SET primary_conninfo = ''")
  await queryOnce(pair.standby.url, 'SELECT pg_reload_conf()')
  await waitFor(
    async () =>
      (await queryOnce(pair.primary.url, 'SELECT 1 FROM pg_stat_replication')).rowCount === 0,
    { what: 'the standby to disconnect' },
  )
  const second = await nextToken()
  expect(second > first).toBe(true)
  expect(await writeWith(second, 'second')).toBeNull()

  await pair.primary.crash()
  // Promoted only once pgfence has seen no primary: else a probe may find the new one first.
  await waitFor(() => logged.some((line) => line.msg.startsWith('no upstream primary')), {
    what: 'pgfence to find no primary',
  })
  await pair.standby.promote()
  // The promoted standby never saw the second write: the row holds the first token again, so
  // without the epochs the first holder's stale write would pass.
  const { rows } = await queryOnce(
    pair.standby.url,
    'SELECT status, fencing_token::text AS token FROM invoices WHERE id = 99',
  )
  expect(rows[0]).toEqual({ status: 'first', token: first.toString() })

  for (const stale of [first, second]) {
    const refused = await writeWith(stale, 'stale')
    expect(refused?.code).toBe('PF409')
    expect(refused?.detail).toContain('a failover invalidated the token')
  }

  const third = await nextToken()
  expect(tokenTimeline(third)).toBe(2)
  expect(third > second).toBe(true)
  try {
    const leasedAfter = await issuer.next()
    expect(tokenTimeline(leasedAfter)).toBe(2)
    expect(leasedAfter > third).toBe(true)
  } finally {
    await issuer.close()
  }
  // One line per change of primary: the first, none, the promoted standby (no standby left).
  expect(primaryLines().map((line) => line.primary)).toEqual([
    pair.primary.hostPort,
    pair.standby.hostPort,
  ])
  expect(primaryLines()[1]!.msg).toContain('replication: none')
  expect(logged.filter((line) => line.msg.startsWith('no upstream primary'))).toHaveLength(1)
  expect(await writeWith(third, 'third')).toBeNull()
  const after = await queryOnce(
    pair.standby.url,
    'SELECT status, fencing_token::text AS token FROM invoices WHERE id = 99',
  )
  expect(after.rows[0]).toEqual({ status: 'third', token: third.toString() })
})
