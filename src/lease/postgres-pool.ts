import pg from 'pg'

const MULTI_HOST_URL = /^(postgres(?:ql)?:\/\/)([^@/?]*@)?([^/?]*)(.*)$/

/**
 * The URL of each host of a libpq multi-host URL (`postgres://user@h1:5432,h2:5432/db`), in
 * order; target_session_attrs is dropped (leases and tokens always go to the primary).
 */
export function hostUrls(url: string): string[] {
  const [, scheme, user = '', hosts = '', rest = ''] = MULTI_HOST_URL.exec(url) ?? []
  if (!scheme || !hosts.includes(',')) return [url]
  const query = rest.replace(/([?&])target_session_attrs=[^&]*&?/, '$1').replace(/[?&]$/, '')
  return hosts.split(',').map((host) => `${scheme}${user}${host}${query}`)
}

/** The node cannot take a write (a standby, read-only, shutting down, or unreachable). */
function notPrimary(err: unknown): boolean {
  const code = (err as { code?: unknown }).code
  return typeof code !== 'string' || /^(08|25|57P|E[A-Z])/.test(code)
}

/**
 * One pool per host; a query goes to the host that answered last, else to the next in order.
 * Queries in flight together each try the hosts from the same one, so that two failing at
 * once do not step back to a host passed over.
 */
class PrimaryPools {
  private current = 0

  constructor(private readonly pools: pg.Pool[]) {}

  async query(text: string, values?: unknown[]): Promise<pg.QueryResult> {
    const first = this.current
    let failure: unknown
    for (let tried = 0; tried < this.pools.length; tried++) {
      const at = (first + tried) % this.pools.length
      try {
        const result = await this.pools[at]!.query(text, values)
        this.current = at
        return result
      } catch (err) {
        if (!notPrimary(err)) throw err
        failure = err
      }
    }
    throw failure
  }

  async end(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.end()))
  }
}

/** What a URL opens: one pool, or for a multi-host URL pools that follow the primary. */
export type OwnPool = pg.Pool | PrimaryPools

/**
 * A PostgreSQL URL gets small pools of its own, which the caller closes (`ownPool`): a
 * multi-host URL follows the primary (a host that cannot take a write is passed over for the
 * next). A pool or client passed in is used as it is and stays open.
 */
export function postgresFrom<Db>(
  source: string | Db,
  onError: (err: Error) => void,
): { db: Db | OwnPool; ownPool: OwnPool | null } {
  if (typeof source !== 'string') return { db: source, ownPool: null }
  const pools = hostUrls(source).map((connectionString) => {
    const pool = new pg.Pool({ connectionString, max: 2 })
    pool.on('error', onError)
    return pool
  })
  const own = pools.length === 1 ? pools[0]! : new PrimaryPools(pools)
  return { db: own, ownPool: own }
}
