import type pg from 'pg'
import { postgresFrom } from './postgres-pool.js'

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

  static from(source: string | TokenQueryable, onError: (err: Error) => void): TokenIssuer {
    const { db, ownPool } = postgresFrom(source, onError)
    return new TokenIssuer(db, ownPool)
  }

  async next(): Promise<bigint> {
    const { rows } = await this.db.query('SELECT pgfence.next_token()::text AS token')
    return BigInt(rows[0]?.token as string)
  }

  async close(): Promise<void> {
    await this.ownPool?.end()
  }
}
