import { Etcd3 } from 'etcd3'
import { Redis } from 'ioredis'
import pg from 'pg'
import { inject } from 'vitest'
import type { LeaseStoreOption } from '../../../src/lease/index.js'
import { redisUrl } from './lease-fixtures.js'

/** The three lease stores; every lease test runs once for each. */
export const storeKinds = ['postgres', 'redis', 'etcd'] as const
export type StoreKind = (typeof storeKinds)[number]

export function etcdUrl(): string {
  const url = inject('etcdUrl')
  if (!url) throw new Error('the lease tests need etcd (PGFENCE_TEST_ETCD_URL or an etcd binary)')
  return url
}

/**
 * One store as a test sees it: the option a manager gets, and a look at the store's own record
 * of a lease, read and changed behind the holder's back. The postgres store lives in the test's
 * token database (`databaseUrl`); Redis and etcd keys are keyPrefix + resource.
 */
export interface StoreFixture {
  kind: StoreKind
  /** The store's address: the token database for postgres. */
  url: string
  /** The option for a manager; `url` in place of the fixture's own address. */
  option(url?: string): LeaseStoreOption
  /** The option for a manager that reaches the store through a relay at `url`, never around it. */
  via(url: string): LeaseStoreOption
  /** Whether the store holds a live lease on `resource`. */
  held(resource: string): Promise<boolean>
  /** Deletes the lease record, as an operator or a failover would. */
  remove(resource: string): Promise<void>
  close(): Promise<void>
}

export function openStoreFixture(
  kind: StoreKind,
  { databaseUrl, keyPrefix }: { databaseUrl: string; keyPrefix: string },
): StoreFixture {
  switch (kind) {
    case 'postgres': {
      const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 })
      const row = (sql: string, resource: string) => pool.query(sql, [resource])
      return {
        kind,
        url: databaseUrl,
        option: (url = databaseUrl) => ({ postgres: url }),
        via: (url) => ({ postgres: url }),
        held: async (resource) =>
          (
            await row(
              'SELECT FROM pgfence.leases WHERE resource = $1 AND expires_at > clock_timestamp()',
              resource,
            )
          ).rowCount === 1,
        remove: async (resource) =>
          void (await row('DELETE FROM pgfence.leases WHERE resource = $1', resource)),
        close: () => pool.end(),
      }
    }
    case 'redis': {
      const redis = new Redis(redisUrl())
      return {
        kind,
        url: redisUrl(),
        option: (url = redisUrl()) => ({ redis: url }),
        // ioredis would otherwise reconnect and retry each command 20 times.
        via: (url) => ({ redis: new Redis(url, { retryStrategy: () => null }) }),
        held: async (resource) => (await redis.exists(keyPrefix + resource)) === 1,
        remove: async (resource) => void (await redis.del(keyPrefix + resource)),
        close: async () => redis.disconnect(),
      }
    }
    case 'etcd': {
      const etcd = new Etcd3({ hosts: etcdUrl() })
      return {
        kind,
        url: etcdUrl(),
        option: (url = etcdUrl()) => ({ etcd: url }),
        // gRPC takes host:port without a path.
        via: (url) => ({ etcd: url.replace(/\/$/, '') }),
        held: async (resource) => (await etcd.get(keyPrefix + resource).string()) !== null,
        remove: async (resource) => void (await etcd.delete().key(keyPrefix + resource)),
        close: async () => etcd.close(),
      }
    }
  }
}
