import type { Redis } from 'ioredis'
import { EtcdLeaseStore, type EtcdSource } from './etcd-lease-store.js'
import type { LeaseStore } from './lease-store.js'
import { PostgresLeaseStore, type LeaseQueryable } from './postgres-lease-store.js'
import { RedisLeaseStore } from './redis-lease-store.js'

/**
 * Where the leases live: a PostgreSQL URL or pg.Pool (the `pgfence.leases` table), a Redis URL
 * or ioredis instance, etcd endpoints or an etcd3 client. Connections passed in stay open.
 */
export type LeaseStoreOption =
  { postgres: string | LeaseQueryable } | { redis: string | Redis } | { etcd: EtcdSource }

export interface StoreChoice {
  store?: LeaseStoreOption
  /** The v2 form of `store: { redis }`. */
  redis?: string | Redis
  keyPrefix?: string
}

const defaultKeyPrefix = 'pgfence:lease:'

/** The store the options name: exactly one of `store` and the top-level `redis`. */
export function chosenStore(choice: StoreChoice): LeaseStoreOption {
  if (choice.store && choice.redis !== undefined) {
    throw new TypeError('LeaseManager: give either store or redis, not both')
  }
  const store = choice.store ?? (choice.redis !== undefined ? { redis: choice.redis } : undefined)
  if (store && ('postgres' in store || 'redis' in store || 'etcd' in store)) return store
  throw new TypeError('LeaseManager: store must be { postgres }, { redis } or { etcd }')
}

/** The postgres store draws each token in its grant; the others need a tokenSource. */
export const storeIssuesTokens = (store: LeaseStoreOption): boolean => 'postgres' in store

export function openLeaseStore(
  store: LeaseStoreOption,
  keyPrefix: string | undefined,
  onError: (err: Error) => void,
): LeaseStore {
  if ('postgres' in store) return PostgresLeaseStore.from(store.postgres, onError)
  if ('redis' in store)
    return RedisLeaseStore.from(store.redis, keyPrefix ?? defaultKeyPrefix, onError)
  return EtcdLeaseStore.from(store.etcd, keyPrefix ?? defaultKeyPrefix)
}
