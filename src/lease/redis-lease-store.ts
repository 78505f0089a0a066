import { Redis } from 'ioredis'
import type { LeaseStore, TakenLease } from './lease-store.js'
import { defineLeaseScripts } from './scripts.js'

/** The lease keys in Redis: `SET NX PX` to take, Lua compare-and-pexpire / compare-and-delete. */
export class RedisLeaseStore implements LeaseStore {
  readonly name = 'the lease store (Redis)'
  /** The last error of an own connection since it was last ready. */
  private lastError: Error | undefined

  private constructor(
    readonly redis: Redis,
    private readonly ownConnection: boolean,
    private readonly keyPrefix: string,
  ) {
    defineLeaseScripts(redis)
  }

  /** A URL gets a connection of its own, closed by `close()`; an instance passed in stays open. */
  static from(
    source: string | Redis,
    keyPrefix: string,
    onError: (err: Error) => void,
  ): RedisLeaseStore {
    if (typeof source !== 'string') return new RedisLeaseStore(source, false, keyPrefix)
    // close() disconnects a connection that is down; ioredis would otherwise keep a timer for
    // its already closed socket (disconnectTimeout, 2 s) that holds the process open.
    const redis = new Redis(source, { disconnectTimeout: 0 })
    const store = new RedisLeaseStore(redis, true, keyPrefix)
    redis.on('error', (err: Error) => {
      store.lastError = err
      onError(err)
    })
    redis.on('ready', () => (store.lastError = undefined))
    return store
  }

  /**
   * The connection is down and has failed (its last error, or that it is reconnecting after a
   * close). Undefined while it is up or still making its first connection.
   */
  failure(): Error | undefined {
    const { status } = this.redis
    if (status === 'ready') return undefined
    if (this.lastError) return this.lastError
    return status === 'reconnecting' ? new Error('the Redis connection is reconnecting') : undefined
  }

  keyOf(resource: string): string {
    return this.keyPrefix + resource
  }

  async take(resource: string, owner: string, ttlMs: number): Promise<TakenLease | null> {
    const set = await this.redis.set(this.keyOf(resource), owner, 'PX', ttlMs, 'NX')
    return set === 'OK' ? {} : null
  }

  async renew(resource: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.pgfenceLeaseRenew(this.keyOf(resource), owner, ttlMs)) === 1
  }

  async release(resource: string, owner: string): Promise<boolean> {
    return (await this.redis.pgfenceLeaseRelease(this.keyOf(resource), owner)) === 1
  }

  /** QUIT waits for the connection to come back while commands are queued: a down one just ends. */
  async close(): Promise<void> {
    if (!this.ownConnection) return
    if (this.redis.status === 'ready') await this.redis.quit()
    else this.redis.disconnect()
  }
}
