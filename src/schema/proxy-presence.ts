/**
 * How `pgfence uninstall` knows that a pgfence proxy fences a database: the session that runs
 * a database's check at login (table-name-checks.ts, at least once a minute while sessions
 * log in) takes a shared session-level advisory lock, which pg_locks shows to any role with
 * the backend's pid. The proxy has no connection or credentials of its own, so the lock lives
 * as long as that client's server connection (or until the client releases every advisory
 * lock, e.g. DISCARD ALL). A pool's server connection outlives its clients: the one that ran a
 * check takes the lock again after each reset (DISCARD ALL releases it), so that it lives as
 * long as that connection. Shared, so that no one waits for it.
 */
const presenceKey = [0x7066656e, 0x70726f78] as const

const heldBy = (pid: string) => `SELECT 1 FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.pid = ${pid} AND l.granted
       AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
       AND l.classid = ${presenceKey[0]} AND l.objid = ${presenceKey[1]} AND l.objsubid = 2`

/** Takes the lock on a connection that does not hold it (a reset released it). */
export const retakePresenceSql = `SELECT pg_catalog.pg_advisory_lock_shared(${presenceKey.join(', ')})`

/** Takes the lock, once per server connection. Columns: none that matter. */
export const holdPresenceSql = `${retakePresenceSql}
 WHERE NOT EXISTS (${heldBy('pg_catalog.pg_backend_pid()')})`

/** The other sessions of this database that hold the lock. Columns: pid, application_name, client. */
export const proxySessionsSql = `SELECT a.pid, a.application_name, a.client_addr::text AS client
  FROM pg_catalog.pg_stat_activity a
 WHERE a.pid <> pg_catalog.pg_backend_pid() AND EXISTS (${heldBy('a.pid')})
 ORDER BY a.pid`
