import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import { Pool } from './pool.js'
import { ServerConnection } from './server-connection.js'

/** One pool per (database, user), made on first use. */
export class PoolRegistry {
  private readonly pools = new Map<string, Pool>()

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
  ) {}

  get(database: string, user: string): Pool {
    const key = `${database}\0${user}`
    let pool = this.pools.get(key)
    if (!pool) {
      const open = (credentials: UpstreamCredentials) =>
        ServerConnection.open(this.config.upstream, user, database, credentials)
      pool = new Pool(this.config.pool, open, this.log.child({ pool: `${user}@${database}` }))
      this.pools.set(key, pool)
    }
    return pool
  }

  close(): void {
    for (const pool of this.pools.values()) pool.close()
    this.pools.clear()
  }
}
