/** What one database's replication lets pgfence promise about commits across a failover. */
export type ReplicationMode = 'synchronous standbys' | 'asynchronous standbys' | 'none'

/** Readable by any role: the settings and the number of standbys streaming now. */
export const REPLICATION_QUERY = `SELECT pg_catalog.current_setting('synchronous_standby_names') AS names,
  pg_catalog.current_setting('synchronous_commit') AS commit,
  (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_replication)::int AS standbys`

const SYNCHRONOUS_COMMITS = new Set(['on', 'remote_write', 'remote_apply'])

export function replicationMode(row: {
  names: string
  commit: string
  standbys: number
}): ReplicationMode {
  if (row.names.trim() !== '' && SYNCHRONOUS_COMMITS.has(row.commit)) return 'synchronous standbys'
  return row.standbys > 0 ? 'asynchronous standbys' : 'none'
}

/** The guarantee of each mode, as `pgfence migrate` and the proxy's log state it. */
export const guarantees: Record<ReplicationMode, string> = {
  'synchronous standbys':
    'a failover to a synchronous standby loses no acknowledged commit; a COMMIT whose wait for the standby is cancelled is reported 08007; tokens issued before a promotion are refused after it (PF409)',
  'asynchronous standbys':
    'a failover may lose acknowledged commits; tokens issued before it are refused after it (PF409), so no holder with an older token writes over a lost newer write',
  none: 'no standby streams: a failover (a promotion) makes earlier tokens refused (PF409); no token is issued twice',
}

/** One line: the database's replication mode and what it guarantees. */
export const guaranteeLine = (mode: ReplicationMode): string =>
  `replication: ${mode}: ${guarantees[mode]}`
