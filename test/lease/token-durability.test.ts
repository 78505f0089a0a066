import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { tokenSourceSql } from '../../src/schema/token-source.js'
import { managerFactory, runSql, uniqueKeyPrefix } from './support/lease-fixtures.js'
import { startThrowawayCluster } from './support/throwaway-cluster.js'

let cluster: Awaited<ReturnType<typeof startThrowawayCluster>>

beforeAll(async () => {
  // Asynchronous commit with a lazy WAL writer: without the token source's own guarantees,
  // the last tokens would exist only in WAL buffers when the server dies.
  cluster = await startThrowawayCluster({ synchronous_commit: 'off', wal_writer_delay: '10000' })
  await runSql(cluster.url, tokenSourceSql)
})

afterAll(async () => {
  await cluster?.remove()
})

async function drawTokens(count: number): Promise<bigint[]> {
  const client = new pg.Client({ connectionString: cluster.url })
  await client.connect()
  try {
    const tokens: bigint[] = []
    for (let i = 0; i < count; i++) {
      const { rows } = await client.query('SELECT pgfence.next_token()::text AS token')
      tokens.push(BigInt(rows[0].token))
    }
    return tokens
  } finally {
    await client.end()
  }
}

describe('pgfence.next_token()', () => {
  it('stays above every issued token across a crash of a server with synchronous_commit=off', async () => {
    const managers = managerFactory({
      tokenSource: cluster.url,
      keyPrefix: uniqueKeyPrefix('durability'),
    })
    // Crosses the sequence's 32-value WAL batches, so both logged and cached values are issued.
    const drawn = await drawTokens(70)
    const lease = await managers.create().acquire('durable')
    const highest = lease.token
    expect(highest).toBeGreaterThan(drawn.at(-1)!)
    await lease.release()
    await managers.closeAll()

    await cluster.crash()
    await cluster.start()

    const [afterRestart] = await drawTokens(1)
    expect(afterRestart).toBeGreaterThan(highest)
  })
})
