import pg from 'pg'
import type { UpstreamConfig } from '../config/schema.js'
import type { UpstreamNode } from './upstream-node.js'
import {
  REPLICATION_QUERY,
  replicationMode,
  type ReplicationMode,
} from './replication-guarantee.js'

/** What a probe learned of a node: unreachable, or what it would accept. */
export type NodeRole = 'down' | 'standby' | 'read-only' | 'primary'

/** node-postgres' ssl option for upstream.tls (prefer: plain, as libpq falls back to it). */
export const pgSsl = (upstream: UpstreamConfig) =>
  upstream.tls === 'require' || upstream.tls === 'verify-full'
    ? { rejectUnauthorized: upstream.tls === 'verify-full' }
    : false

/** libpq's target_session_attrs: may new server connections go to a node of this role? */
export const qualifies: Record<UpstreamConfig['targetSessionAttrs'], (role: NodeRole) => boolean> =
  {
    'read-write': (role) => role === 'primary',
    primary: (role) => role === 'primary' || role === 'read-only',
    any: (role) => role !== 'down',
  }

const ROLE_QUERY =
  "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_setting('transaction_read_only')"

/**
 * Asks one node what it is over a connection kept open between probes (one backend per node,
 * not one per probe). It logs in with libpq's environment: PGUSER (default postgres),
 * PGPASSWORD, PGDATABASE (default postgres). No answer within connectTimeoutMs: down.
 */
export class SqlProbe {
  private client: pg.Client | null = null

  constructor(private readonly node: UpstreamNode) {}

  async role(): Promise<NodeRole> {
    try {
      const client = await this.connected()
      const { rows } = await client.query<[boolean, string]>({ text: ROLE_QUERY, rowMode: 'array' })
      const [inRecovery, readOnly] = rows[0]!
      return inRecovery ? 'standby' : readOnly === 'on' ? 'read-only' : 'primary'
    } catch {
      this.close()
      return 'down'
    }
  }

  /** The node's replication mode (null: no answer). */
  async replication(): Promise<ReplicationMode | null> {
    try {
      const client = await this.connected()
      const { rows } = await client.query(REPLICATION_QUERY)
      return replicationMode(rows[0])
    } catch {
      return null
    }
  }

  close(): void {
    void this.client?.end().catch(() => {})
    this.client = null
  }

  private async connected(): Promise<pg.Client> {
    if (this.client) return this.client
    const { config } = this.node
    const client = new pg.Client({
      host: config.host,
      port: config.port,
      user: process.env.PGUSER ?? 'postgres',
      database: process.env.PGDATABASE ?? 'postgres',
      application_name: 'pgfence primary check',
      connectionTimeoutMillis: config.connectTimeoutMs,
      query_timeout: config.connectTimeoutMs,
      ssl: pgSsl(config),
    })
    client.on('error', () => this.close())
    this.client = client
    await client.connect()
    return client
  }
}
