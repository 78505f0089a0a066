import { postgresFrom } from './postgres-pool.js'

/** Anything that runs one query and returns rows: a pg.Pool or pg.Client. */
export interface TokenQueryable {
  query(text: string): Promise<{ rows: Array<Record<string, unknown>> }>
}

/** `pgfence.timeline()`: the timeline the server's tokens are issued on now. */
export const TIMELINE_SQL = 'SELECT pgfence.timeline()::text AS timeline'

/**
 * Issues fencing tokens from `pgfence.next_token()` (installed by `pgfence migrate`). The token
 * is read as text and converted with BigInt, so it stays exact whatever int8 parser the pool uses.
 * A multi-host URL follows the primary: a host that cannot issue (a standby, a lost primary) is
 * passed over for the next.
 */
export class TokenIssuer {
  private constructor(
    private readonly db: TokenQueryable,
    private readonly own: { end(): Promise<void> } | null,
  ) {}

  /** A URL gets small pools of its own, closed by `close()`; a pool passed in stays open. */
  static from(source: string | TokenQueryable, onError: (err: Error) => void): TokenIssuer {
    const { db, ownPool } = postgresFrom(source, onError)
    return new TokenIssuer(db, ownPool)
  }

  async next(): Promise<bigint> {
    const { rows } = await this.db.query('SELECT pgfence.next_token()::text AS token')
    return BigInt(rows[0]?.token as string)
  }

  /** The timeline the primary issues tokens on now (it grows at every promotion). */
  async timeline(): Promise<number> {
    const { rows } = await this.db.query(TIMELINE_SQL)
    return Number(rows[0]?.timeline)
  }

  async close(): Promise<void> {
    await this.own?.end()
  }
}
