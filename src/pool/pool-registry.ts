import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import type { Config, ConfigInForce } from '../config/schema.js'
import type { Logger } from '../log.js'
import { Pool, type IdleLender, type PoolObserver, type PoolStats } from './pool.js'
import { ServerConnection } from './server-connection.js'
import { PgError } from '../wire/error-response.js'
import { connectToPrimary, deadlineAfter, type Upstream } from '../upstream/primary-tracker.js'
import type { UpstreamNode } from '../upstream/upstream-node.js'

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
  /** Offered every pool's idle connections, from the pools made after it is set. */
  lender: IdleLender | null = null

  constructor(
    private readonly live: ConfigInForce,
    private readonly upstream: Upstream,
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
        connectToPrimary(
          this.upstream,
          deadlineAfter(live.config.pool.waitTimeoutMs, noPrimaryInTime(live.config.pool)),
          (node) =>
            openOnPrimary(
              node,
              live.config.tcpKeepalive,
              user,
              database,
              credentials,
              nativeTls,
              this.upstream,
            ),
          (connection) => connection.destroy(),
        )
      const log = this.log.child({ pool: `${user}@${database}` })
      const pool = new Pool(() => live.config.pool, open, log, this.observers(database, user))
      pool.lender = this.lender
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

  /** Closes idle connections to a node no longer the primary and asks for kept ones back. */
  sweep(): void {
    for (const { pool } of this.pools.values()) pool.sweep()
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

const noPrimaryInTime = ({ waitTimeoutMs }: Config['pool']) =>
  new PgError(
    '08006',
    `no upstream primary to connect to within ${waitTimeoutMs} ms (pool.waitTimeoutMs)`,
  )

/**
 * A server connection to `node`. Following a primary, it is refused (08006, so that the primary
 * is checked again) when the node says at login that it is a standby (PostgreSQL 14+ reports
 * in_hot_standby): a promotion or demotion the checks have yet to see.
 */
async function openOnPrimary(
  node: UpstreamNode,
  tcpKeepalive: Config['tcpKeepalive'],
  user: string,
  database: string,
  credentials: UpstreamCredentials,
  nativeTls: boolean,
  upstream: Upstream,
): Promise<ServerConnection> {
  const connection = await ServerConnection.open(
    node,
    tcpKeepalive,
    user,
    database,
    credentials,
    nativeTls,
  )
  const standby = upstream.following && connection.parameters.get('in_hot_standby') === 'on'
  if (connection.alive && !standby) return connection
  connection.destroy()
  upstream.suspect(node)
  throw new PgError('08006', `upstream server ${node.name} is not the primary`)
}
