import pg from 'pg'

/** Anything that runs one query and returns rows: a pg.Pool or pg.Client. */
export interface TokenQueryable {
  query(text: string): Promise<{ rows: Array<Record<string, unknown>> }>
}

const MULTI_HOST_URL = /^(postgres(?:ql)?:\/\/)([^@/?]*@)?([^/?]*)(.*)$/

/**
 * The URL of each host of a libpq multi-host URL (`postgres://user@h1:5432,h2:5432/db`), in
 * order; target_session_attrs is dropped (tokens always come from the primary).
 */
export function hostUrls(url: string): string[] {
  const [, scheme, user = '', hosts = '', rest = ''] = MULTI_HOST_URL.exec(url) ?? []
  if (!scheme || !hosts.includes(',')) return [url]
  const query = rest.replace(/([?&])target_session_attrs=[^&]*&?/, '$1').replace(/[?&]$/, '')
  return hosts.split(',').map((host) => `${scheme}${user}${host}${query}`)
}

/** The node cannot issue a token (a standby, read-only, shutting down, or unreachable). */
function notPrimary(err: unknown): boolean {
  const code = (err as { code?: unknown }).code
  return typeof code !== 'string' || /^(08|25|57P|E[A-Z])/.test(code)
}

/** One pool per host; a query goes to the host that answered last, else to the next in order. */
class PrimaryPools implements TokenQueryable {
  private current = 0

  constructor(private readonly pools: pg.Pool[]) {}

  async query(text: string): Promise<{ rows: Array<Record<string, unknown>> }> {
    let failure: unknown
    for (let tried = 0; tried < this.pools.length; tried++) {
      try {
        return await this.pools[this.current]!.query(text)
      } catch (err) {
        if (!notPrimary(err)) throw err
        failure = err
        this.current = (this.current + 1) % this.pools.length
      }
    }
    throw failure
  }

  async end(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.end()))
  }
}

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
    if (typeof source !== 'string') return new TokenIssuer(source, null)
    const pools = hostUrls(source).map((connectionString) => {
      const pool = new pg.Pool({ connectionString, max: 2 })
      pool.on('error', onError)
      return pool
    })
    const db = pools.length === 1 ? pools[0]! : new PrimaryPools(pools)
    return new TokenIssuer(db, db)
  }

  async next(): Promise<bigint> {
    const { rows } = await this.db.query('SELECT pgfence.next_token()::text AS token')
    return BigInt(rows[0]?.token as string)
  }

  async close(): Promise<void> {
    await this.own?.end()
  }
}
