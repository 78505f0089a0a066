import { postgresFrom, type OwnPool } from './postgres-pool.js'
import type { LeaseStore, TakenLease } from './lease-store.js'
import { TIMELINE_SQL } from './token-issuer.js'

/** Anything that runs a parameterised query: a pg.Pool or pg.Client. */
export interface LeaseQueryable {
  query(
    text: string,
    values: unknown[],
  ): Promise<{ rows: Array<Record<string, unknown>>; rowCount: number | null }>
}

const expiresAfterTtl = `clock_timestamp() + $3 * interval '1 millisecond'`

/**
 * Grants the lease if the row is absent or its lease is over, with a token drawn in the same
 * statement (so in the same transaction, committed synchronously by next_token()). The NOT
 * EXISTS filter keeps a refused take from drawing a token. A takeover draws its token in the
 * DO UPDATE, after the row is locked, so it is higher than the previous holder's.
 */
const takeSql = `INSERT INTO pgfence.leases AS lease (resource, owner, token, granted_at, expires_at)
SELECT $1, $2, pgfence.next_token(), clock_timestamp(), ${expiresAfterTtl}
WHERE NOT EXISTS (
  SELECT FROM pgfence.leases WHERE resource = $1 AND expires_at > clock_timestamp()
)
ON CONFLICT (resource) DO UPDATE
SET owner = excluded.owner,
    token = pgfence.next_token(),
    granted_at = clock_timestamp(),
    expires_at = ${expiresAfterTtl}
WHERE lease.expires_at <= clock_timestamp()
RETURNING lease.token::text AS token`

const renewSql = `UPDATE pgfence.leases SET expires_at = ${expiresAfterTtl}
WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()`

/** Compare-and-delete: the row stays (see src/schema/lease-table.ts), its lease ends now. */
const releaseSql = `UPDATE pgfence.leases SET expires_at = clock_timestamp()
WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()`

/**
 * Leases as rows of `pgfence.leases` (installed by `pgfence migrate`), timed by PostgreSQL's
 * clock: each take, renewal and release is one statement. A multi-host URL follows the primary.
 */
export class PostgresLeaseStore implements LeaseStore {
  readonly name = 'the lease store (PostgreSQL)'
  private constructor(
    private readonly db: LeaseQueryable,
    private readonly ownPool: OwnPool | null,
  ) {}

  static from(source: string | LeaseQueryable, onError: (err: Error) => void): PostgresLeaseStore {
    const { db, ownPool } = postgresFrom(source, onError)
    return new PostgresLeaseStore(db, ownPool)
  }

  async take(resource: string, owner: string, ttlMs: number): Promise<TakenLease | null> {
    const { rows } = await this.db.query(takeSql, [resource, owner, ttlMs])
    const token = rows[0]?.token
    return typeof token === 'string' ? { token: BigInt(token) } : null
  }

  async renew(resource: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.db.query(renewSql, [resource, owner, ttlMs])).rowCount === 1
  }

  async release(resource: string, owner: string): Promise<boolean> {
    return (await this.db.query(releaseSql, [resource, owner])).rowCount === 1
  }

  /** The timeline the store's primary issues tokens on now (it grows at every promotion). */
  async timeline(): Promise<number> {
    const { rows } = await this.db.query(TIMELINE_SQL, [])
    return Number(rows[0]?.timeline)
  }

  /** Nothing known ahead of a request: its pool reports errors per query. */
  failure(): Error | undefined {
    return undefined
  }

  async close(): Promise<void> {
    await this.ownPool?.end()
  }
}
