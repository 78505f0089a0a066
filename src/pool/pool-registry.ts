import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import type { ConfigInForce } from '../config/schema.js'
import type { Logger } from '../log.js'
import { Pool, type PoolObserver, type PoolStats } from './pool.js'
import { ServerConnection } from './server-connection.js'

/** The observer of the pool of one (database, user). */
export type PoolObservers = (database: string, user: string) => PoolObserver

/** One pool's name and figures. */
export interface NamedPoolStats extends PoolStats {
  database: string
  user: string
}

const unobserved: PoolObserver = { waited: () => {}, timedOut: () => {} }

/** One pool per (database, user), made on first use. */
export class PoolRegistry {
  private readonly pools = new Map<string, { database: string; user: string; pool: Pool }>()

  constructor(
    private readonly live: ConfigInForce,
    private readonly log: Logger,
    private readonly observers: PoolObservers = () => unobserved,
  ) {}

  get(database: string, user: string): Pool {
    const key = `${database}\0${user}`
    let entry = this.pools.get(key)
    if (!entry) {
      const { live } = this
      // Session pools lend their connections to the native relay, which then owns their TLS.
      const nativeTls = live.config.relay === 'native' && live.config.pool.mode === 'session'
      const open = (credentials: UpstreamCredentials) =>
        ServerConnection.open(live.config, user, database, credentials, nativeTls)
      const log = this.log.child({ pool: `${user}@${database}` })
      const pool = new Pool(() => live.config.pool, open, log, this.observers(database, user))
      entry = { database, user, pool }
      this.pools.set(key, entry)
    }
    return entry.pool
  }

  /** Every pool's figures now. */
  stats(): NamedPoolStats[] {
    return [...this.pools.values()].map(({ database, user, pool }) => ({
      database,
      user,
      ...pool.stats(),
    }))
  }

  /** A reload changed pool settings: every pool follows them. */
  reconfigure(): void {
    for (const { pool } of this.pools.values()) pool.reconfigure()
  }

  close(): void {
    for (const { pool } of this.pools.values()) pool.close()
    this.pools.clear()
  }
}
