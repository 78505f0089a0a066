import pg from 'pg'

/** Anything that runs one query and returns rows: a pg.Pool or pg.Client. */
export interface TokenQueryable {
  query(text: string): Promise<{ rows: Array<Record<string, unknown>> }>
}

/**
 * Issues fencing tokens from `pgfence.next_token()` (installed by `pgfence migrate`). The token
 * is read as text and converted with BigInt, so it stays exact whatever int8 parser the pool uses.
 */
export class TokenIssuer {
  private constructor(
    private readonly db: TokenQueryable,
    private readonly ownPool: pg.Pool | null,
  ) {}

  /** A URL gets a small pool of its own, closed by `close()`; a pool passed in stays open. */
  static from(source: string | TokenQueryable, onError: (err: Error) => void): TokenIssuer {
    if (typeof source !== 'string') return new TokenIssuer(source, null)
    const pool = new pg.Pool({ connectionString: source, max: 2 })
    pool.on('error', onError)
    return new TokenIssuer(pool, pool)
  }

  async next(): Promise<bigint> {
    const { rows } = await this.db.query('SELECT pgfence.next_token()::text AS token')
    return BigInt(rows[0]?.token as string)
  }

  async close(): Promise<void> {
    await this.ownPool?.end()
  }
}
