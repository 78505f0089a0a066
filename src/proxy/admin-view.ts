import type { ConsoleCommands, ConsoleTable, ShowSubject } from '../admin/console.js'
import type { ProxyMetrics } from '../admin/metrics.js'
import { parseTableName } from '../config/table-names.js'
import type { NamedPoolStats } from '../pool/pool-registry.js'
import type { LiveConfig } from './live-config.js'
import { poolRows } from './pool-view.js'
import type { SessionRegistry } from './session-registry.js'

const REJECTION_CODES = ['PF409', 'PF428', 'PF400', 'PF501'] as const

type Rejections = Map<string, Map<string, number>>

/** Rejections of the tables a config name may denote (`schema.table` keys, as reported). */
function rejectionsFor(names: readonly string[], rejections: Rejections): number[] {
  const tables = names.map(parseTableName)
  const counts = REJECTION_CODES.map(() => 0)
  for (const [key, byCode] of rejections) {
    const dot = key.indexOf('.')
    const schema = key.slice(0, dot)
    const name = key.slice(dot + 1)
    if (!tables.some((t) => t.name === name && (t.schema === undefined || t.schema === schema)))
      continue
    REJECTION_CODES.forEach((code, i) => (counts[i]! += byCode.get(code) ?? 0))
  }
  return counts
}

async function fencing(live: LiveConfig, metrics: ProxyMetrics): Promise<ConsoleTable> {
  const rejections = await metrics.rejectionsByTable()
  const { tables, resources } = live.config.fencing
  return {
    columns: [
      'kind',
      'name',
      'tables',
      'column',
      'require_token',
      ...REJECTION_CODES.map((c) => c.toLowerCase()),
    ],
    rows: [
      ...tables.map((t) => [
        'table',
        t.name,
        t.name,
        t.column,
        t.requireToken,
        ...rejectionsFor([t.name], rejections),
      ]),
      ...resources.map((r) => [
        'resource',
        r.resource ?? '(from session)',
        r.tables.join(', '),
        null,
        true,
        ...rejectionsFor(r.tables, rejections),
      ]),
    ],
  }
}

async function stats(
  registry: SessionRegistry,
  live: LiveConfig,
  metrics: ProxyMetrics,
): Promise<ConsoleTable> {
  const lookups = live.cacheLookups()
  let rejected = 0
  for (const byCode of (await metrics.rejectionsByTable()).values())
    for (const count of byCode.values()) rejected += count
  return {
    columns: [
      'client_connections',
      'sessions',
      'native_relay_sessions',
      'transactions',
      'fencing_rejections',
      'upstream_connect_failures',
      'rewrite_cache_hits',
      'rewrite_cache_misses',
    ],
    rows: [
      [
        registry.connections.size,
        registry.sessions.size,
        registry.nativeRelaySessions(),
        registry.transactions(),
        rejected,
        await metrics.upstreamConnectFailures(),
        lookups.hits,
        lookups.misses,
      ],
    ],
  }
}

/** Every config key in force, flattened to dotted names. */
function configRows(value: unknown, prefix = ''): [string, string][] {
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return [[prefix, typeof value === 'string' ? value : JSON.stringify(value)]]
  return Object.entries(value).flatMap(([key, inner]) =>
    inner === undefined ? [] : configRows(inner, prefix ? `${prefix}.${key}` : key),
  )
}

/** The admin console's commands over the proxy's state; `pools`: null when pool.mode is none. */
export function consoleCommands(
  registry: SessionRegistry,
  live: LiveConfig,
  metrics: ProxyMetrics,
  pools: () => NamedPoolStats[] | null,
): ConsoleCommands {
  const tables: Record<ShowSubject, () => ConsoleTable | Promise<ConsoleTable>> = {
    clients: () => registry.clientRows(),
    servers: () => registry.serverRows(),
    pools: () => poolRows(registry, pools(), live.config.pool.mode),
    stats: () => stats(registry, live, metrics),
    fencing: () => fencing(live, metrics),
    config: () => ({ columns: ['key', 'value'], rows: configRows(live.config) }),
  }
  return {
    show: async (subject) => tables[subject](),
    reload: () => live.reload(registry.sessions.keys()),
  }
}
