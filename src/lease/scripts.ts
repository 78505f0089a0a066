import type { Redis, Result } from 'ioredis'

/** Extends the TTL only while the key still holds this owner: 1 renewed, 0 not ours. */
const renewScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`

/** Deletes the key only while it still holds this owner: 1 deleted, 0 not ours. */
const releaseScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`

declare module 'ioredis' {
  interface RedisCommander<Context> {
    pgfenceLeaseRenew(key: string, owner: string, ttlMs: number): Result<number, Context>
    pgfenceLeaseRelease(key: string, owner: string): Result<number, Context>
  }
}

/** Registers the scripts once per connection; ioredis runs them by SHA (EVALSHA, EVAL on NOSCRIPT). */
export function defineLeaseScripts(redis: Redis): void {
  if (typeof redis.pgfenceLeaseRenew === 'function') return
  redis.defineCommand('pgfenceLeaseRenew', { numberOfKeys: 1, lua: renewScript })
  redis.defineCommand('pgfenceLeaseRelease', { numberOfKeys: 1, lua: releaseScript })
}
