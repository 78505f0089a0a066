import type { PoolConfig } from '../config/schema.js'
import type { NamedPoolStats } from '../pool/pool-registry.js'
import { poolKey, type SessionRegistry } from '../session/session-registry.js'
import type { ConsoleTable } from './console.js'

/** PgBouncer's SHOW POOLS columns, less those of features pgfence has not (sv_used, sv_tested…). */
const POOL_COLUMNS = [
  'database',
  'user',
  'cl_active',
  'cl_waiting',
  'sv_active',
  'sv_idle',
  'sv_login',
  'maxwait',
  'maxwait_us',
  'pool_mode',
] as const

/** Server connections by state: the pools' own when pooling, else one per session. */
export function serverStates(
  registry: SessionRegistry,
  pools: NamedPoolStats[] | null,
): Record<string, number> {
  if (pools === null) return registry.serverConnections()
  const states = { login: 0, active: 0, idle: 0 }
  for (const pool of pools) {
    states.login += pool.login
    states.active += pool.active
    states.idle += pool.idle
  }
  return states
}

/** SHOW POOLS: one row per (database, user), as PgBouncer lists its pools. */
export function poolRows(
  registry: SessionRegistry,
  pools: NamedPoolStats[] | null,
  mode: PoolConfig['mode'],
): ConsoleTable {
  const clients = registry.clientsByPool()
  if (pools === null) {
    // pool.mode none: one server connection per client, nobody waits.
    const rows = [...clients.values()].map((p) => [
      p.database,
      p.user,
      p.clients,
      0,
      p.clients,
      0,
      0,
      0,
      0,
      mode,
    ])
    return { columns: POOL_COLUMNS, rows }
  }
  const rows = pools.map((pool) => {
    const sessions = clients.get(poolKey(pool.database, pool.user))?.clients ?? 0
    // A session-mode client waits before its session exists; a transaction-mode one within it.
    const active = mode === 'transaction' ? Math.max(0, sessions - pool.waiting) : sessions
    const waitedUs = Math.floor(pool.maxWaitMs * 1000)
    return [
      pool.database,
      pool.user,
      active,
      pool.waiting,
      pool.active,
      pool.idle,
      pool.login,
      Math.floor(waitedUs / 1e6),
      waitedUs % 1e6,
      mode,
    ]
  })
  return { columns: POOL_COLUMNS, rows }
}
