import { Redis } from 'ioredis'
import type { LeaseStore, TakenLease } from './lease-store.js'
import { defineLeaseScripts } from './scripts.js'

/** The lease keys in Redis: `SET NX PX` to take, Lua compare-and-pexpire / compare-and-delete. */
export class RedisLeaseStore implements LeaseStore {
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
    const redis = new Redis(source)
    redis.on('error', onError)
    return new RedisLeaseStore(redis, true, keyPrefix)
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

  async close(): Promise<void> {
    if (this.ownConnection) await this.redis.quit()
  }
}
