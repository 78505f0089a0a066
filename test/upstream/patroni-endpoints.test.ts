import http from 'node:http'
import type { AddressInfo } from 'node:net'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { waitFor } from '../e2e/support/wait.js'
import { queryOnce } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { startReplicaPair, type ReplicaPair } from '../support/replica-pair.js'

/**
 * Patroni's REST answer, played by two loopback HTTP servers (GET /primary: 200 on the leader,
 * 503 elsewhere), in front of a real primary/standby pair: the leader key moves while the former
 * primary stays writable, as in a split brain.
 */
let leader: 0 | 1 | null = 0
/** The endpoint that holds every request unanswered, as a frozen Patroni does. */
let frozen: 0 | 1 | null = null
/** The requests a frozen endpoint holds, answered when it thaws. */
const held: (() => void)[] = []
/** Patroni's timings as GET /config gives them: a 200 vouches for ttl − 1 − 1 = 1 s. */
const TIMINGS = { ttl: 3, loop_wait: 1, retry_timeout: 1 }
const endpoints: http.Server[] = []
let pair: ReplicaPair
let proxy: TestProxy

function thaw(): void {
  frozen = null
  for (const answer of held.splice(0)) answer()
}

async function patroniEndpoint(index: 0 | 1): Promise<string> {
  const server = http.createServer((request, response) => {
    const answer = () => {
      if (request.url === '/config') return response.end(JSON.stringify(TIMINGS))
      response.statusCode = request.url === '/primary' && leader === index ? 200 : 503
      response.end()
    }
    if (frozen === index) held.push(answer)
    else answer()
  })
  endpoints.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

beforeAll(async () => {
  pair = await startReplicaPair('patroni')
  await queryOnce(pair.primary.url, 'CREATE TABLE ledger (id serial PRIMARY KEY, note text)')
  proxy = await startTestProxy(
    {
      upstream: {
        hosts: [pair.primary.hostPort, pair.standby.hostPort],
        patroni: [await patroniEndpoint(0), await patroniEndpoint(1)],
        primaryCheckIntervalMs: 100,
        // Far longer than a failover takes: a frozen endpoint must not hold pgfence up this long.
        connectTimeoutMs: 30_000,
      },
      admin: { listen: { port: 0 } },
    },
    pair.primary.url,
  )
}, 60_000)

afterAll(async () => {
  thaw()
  await proxy?.close()
  for (const server of endpoints) {
    server.closeAllConnections()
    server.close()
  }
  await pair?.remove()
})

const readyz = async () => (await fetch(`http://127.0.0.1:${proxy.adminPort}/readyz`)).status

async function writeThrough(note: string): Promise<number> {
  const { rows } = await queryOnce(
    proxy.url(),
    `INSERT INTO ledger (note) VALUES ('${note}') RETURNING inet_server_port() AS port`,
  )
  return rows[0].port
}

const notesOn = async (url: string) =>
  (await queryOnce(url, 'SELECT note FROM ledger ORDER BY id')).rows.map((row) => row.note)

test('a writable former primary gets no write once the leader key moved', async () => {
  await waitFor(async () => (await readyz()) === 200, { what: 'a primary' })
  expect(await writeThrough('on the leader')).toBe(pair.primary.port)
  const held = new pg.Client({ connectionString: proxy.url() })
  const ended = new Promise<Error & { code?: string }>((resolve) => held.on('error', resolve))
  await held.connect()
  await held.query('BEGIN')

  await pair.standby.promote()
  leader = 1
  expect((await ended).code).toBe('08006')
  await held.end().catch(() => {})
  expect(await writeThrough('on the new leader')).toBe(pair.standby.port)

  // The former primary still takes writes from anyone connected to it directly…
  await queryOnce(pair.primary.url, "INSERT INTO ledger (note) VALUES ('split brain')")
  // …but none came through pgfence after the leader key moved.
  expect(await notesOn(pair.primary.url)).toEqual(['on the leader', 'split brain'])
  expect(await notesOn(pair.standby.url)).toEqual(['on the leader', 'on the new leader'])

  // No leader: not ready, and a login waits for the next one.
  leader = null
  await waitFor(async () => (await readyz()) === 503, { what: 'readyz 503' })
  const late = new pg.Client({ connectionString: proxy.url() })
  const login = late.connect()
  leader = 1
  await login
  try {
    const { rows } = await late.query('SELECT inet_server_port() AS port')
    expect(rows[0].port).toBe(pair.standby.port)
  } finally {
    await late.end()
  }
})

test('an endpoint that never answers does not hold pgfence on its node once another holds the key', async () => {
  // The leader's Patroni freezes (its REST API accepts and never answers); the key moves back
  // to the former primary, still writable.
  frozen = 1
  leader = 0
  // Followed within a few checks, not after the frozen request's timeout (connectTimeoutMs).
  const gauge = `pgfence_upstream_primary{host="${pair.primary.hostPort}"} 1`
  await waitFor(
    async () =>
      (await (await fetch(`http://127.0.0.1:${proxy.adminPort}/metrics`)).text()).includes(gauge),
    { timeoutMs: 10_000, what: 'pgfence to follow the key past the frozen endpoint' },
  )
  expect(await writeThrough('past a frozen endpoint')).toBe(pair.primary.port)
})

test("a leader's endpoint that stops answering stops vouching for its node before the key could move", async () => {
  thaw()
  leader = 0
  const gauge = `pgfence_upstream_primary{host="${pair.primary.hostPort}"} 1`
  const metrics = async () => (await fetch(`http://127.0.0.1:${proxy.adminPort}/metrics`)).text()
  await waitFor(async () => (await metrics()).includes(gauge), { what: 'the leader followed' })
  const failovers = (await metrics()).match(/^pgfence_failovers_total (\d+)/m)![1]
  const held = new pg.Client({ connectionString: proxy.url() })
  const ended = new Promise<Error & { code?: string }>((resolve) => held.on('error', resolve))
  await held.connect()
  await held.query('BEGIN')

  // The leader's Patroni freezes; no other node ever answers 200.
  const frozenAt = Date.now()
  frozen = 0
  expect((await ended).code).toBe('08006')
  // Cut before the key (ttl 3 s from its last renewal) could have expired.
  expect(Date.now() - frozenAt).toBeLessThan(TIMINGS.ttl * 1000)
  await held.end().catch(() => {})
  expect(await readyz()).toBe(503)

  // Thawed, its answers vouch again: the same node is followed, and that is no failover.
  thaw()
  expect(await writeThrough('after the thaw')).toBe(pair.primary.port)
  expect((await metrics()).match(/^pgfence_failovers_total (\d+)/m)![1]).toBe(failovers)
})
