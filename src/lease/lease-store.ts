import { Redis } from 'ioredis'
import { defineLeaseScripts } from './scripts.js'

/** The lease keys in Redis: `SET NX PX` to take, Lua compare-and-pexpire / compare-and-delete. */
export class LeaseStore {
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
  ): LeaseStore {
    if (typeof source !== 'string') return new LeaseStore(source, false, keyPrefix)
    const redis = new Redis(source)
    redis.on('error', onError)
    return new LeaseStore(redis, true, keyPrefix)
  }

  keyOf(resource: string): string {
    return this.keyPrefix + resource
  }

  async take(resource: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(this.keyOf(resource), owner, 'PX', ttlMs, 'NX')) === 'OK'
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
