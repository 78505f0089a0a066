import { performance } from 'node:perf_hooks'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { LeaseManager } from '../../src/lease/index.js'
import type { TestDatabase } from '../support/database.js'
import { startEtcdCluster, type EtcdCluster } from '../support/etcd.js'
import { createTokenDatabase, managerFactory, uniqueKeyPrefix } from './support/lease-fixtures.js'

const ttlMs = 2000
let db: TestDatabase
let cluster: EtcdCluster
let managers: ReturnType<typeof managerFactory>

beforeAll(async () => {
  ;[db, cluster] = await Promise.all([
    createTokenDatabase('lease_etcd_cluster'),
    startEtcdCluster(3),
  ])
  managers = managerFactory({
    store: { etcd: cluster.endpoints },
    tokenSource: db.url,
    ttlMs,
    keyPrefix: uniqueKeyPrefix('etcd-cluster'),
  })
})

afterAll(async () => {
  await managers?.closeAll().catch(() => {})
  await cluster?.remove()
  await db?.drop()
})

/** Tries to take `resource` until `untilMs` from now; the lease, or the last error. */
async function tryToTake(manager: LeaseManager, resource: string, untilMs: number) {
  const startedAt = performance.now()
  try {
    return { lease: await manager.acquire(resource, { waitMs: untilMs }), startedAt }
  } catch (error) {
    return { error, startedAt, failedAfter: performance.now() - startedAt }
  }
}

describe('the etcd store on a three-member cluster', () => {
  // Either outcome is allowed: the new leader keeps the lease alive, or the holder's renewals
  // fail while the cluster elects one and its signal aborts. Never both holders at once.
  it('keeps or reports the lease when its leader stops, and never hands it out twice', async () => {
    const holder = await managers.create().acquire('leader-stops')
    await cluster.stop(await cluster.leader())
    const rival = await tryToTake(managers.create(), 'leader-stops', 3 * ttlMs)
    if (rival.lease) {
      // Granted again only once the first holder had been told, or could no longer act.
      expect(holder.signal.aborted || holder.remainingMs() <= 0).toBe(true)
      expect(rival.lease.token).toBeGreaterThan(holder.token)
      await rival.lease.release()
    }
    if (!holder.signal.aborted) expect(holder.remainingMs()).toBeGreaterThan(0)
    await holder.release().catch(() => false)
  })

  it('refuses to grant without a majority, with an error within waitMs', async () => {
    // One member already stopped; a second leaves one of three.
    await cluster.stop(cluster.running()[0]!)
    const waitMs = 2 * ttlMs
    const rival = await tryToTake(managers.create(), 'no-majority', waitMs)
    expect(rival.lease).toBeUndefined()
    expect(rival.error).toBeInstanceOf(Error)
    expect(rival.failedAfter).toBeLessThan(waitMs + 500)
  })
})
