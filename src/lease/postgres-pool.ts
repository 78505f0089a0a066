import pg from 'pg'

/**
 * A PostgreSQL URL gets a small pool of its own, which the caller closes (`ownPool`); a pool or
 * client passed in is used as it is and stays open.
 */
export function postgresFrom<Db>(
  source: string | Db,
  onError: (err: Error) => void,
): { db: Db | pg.Pool; ownPool: pg.Pool | null } {
  if (typeof source !== 'string') return { db: source, ownPool: null }
  const pool = new pg.Pool({ connectionString: source, max: 2 })
  pool.on('error', onError)
  return { db: pool, ownPool: pool }
}
