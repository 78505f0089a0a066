import type { Config } from '../config/schema.js'
import { parseTableName } from '../config/table-names.js'
import type { CacheLookups } from '../fencing/live-settings.js'
import { FENCING_CODES } from '../rewrite/refusal.js'
import type { NamedPoolStats } from '../pool/pool-registry.js'
import type { RegisteredSession, SessionRegistry } from '../session/session-registry.js'
import type { ConsoleCommands, ConsoleTable, ConsoleValue, ShowSubject } from './console.js'
import type { ProxyMetrics } from './metrics.js'
import { poolRows } from './pool-view.js'
import { clientRows, serverRows } from './session-view.js'

/** What the console reads of the config in force and how it reloads it (the proxy's LiveConfig). */
export interface ConfigInForce {
  readonly config: Config
  cacheLookups(): CacheLookups
  reload(sessions: Iterable<RegisteredSession>): Promise<void>
}

/** Whether a `schema.table` key, as rejections are counted, is a table a config name may denote. */
function denotes(names: readonly string[], key: string): boolean {
  const dot = key.indexOf('.')
  const counted = { schema: key.slice(0, dot), name: key.slice(dot + 1) }
  return names
    .map(parseTableName)
    .some((t) => t.name === counted.name && (t.schema === undefined || t.schema === counted.schema))
}

/** How a `schema.table` key shows when it names no table (a rejection raised outside any). */
const keyText = (key: string): string => (key === '.' ? '(no table)' : key)

async function fencing(live: ConfigInForce, metrics: ProxyMetrics): Promise<ConsoleTable> {
  const { tables, resources } = live.config.fencing
  const rules = [
    ...tables.map((t) => ({
      row: ['table', t.name, t.name, t.column, t.requireToken],
      names: [t.name],
    })),
    ...resources.map((r) => ({
      row: ['resource', r.resource ?? '(from session)', r.tables.join(', '), null, true],
      names: r.tables,
    })),
  ]
  // Each counted table goes to the one rule that may denote it (rules never overlap), the rest
  // to a last row: the rows add up to SHOW STATS' fencing_rejections.
  const counts = rules.map(() => FENCING_CODES.map(() => 0))
  const other = FENCING_CODES.map(() => 0)
  const otherKeys: string[] = []
  for (const [key, byCode] of await metrics.rejectionsByTable()) {
    const index = rules.findIndex((rule) => denotes(rule.names, key))
    if (index < 0) otherKeys.push(keyText(key))
    const into = index < 0 ? other : counts[index]!
    FENCING_CODES.forEach((code, i) => (into[i]! += byCode.get(code) ?? 0))
  }
  const rows: ConsoleValue[][] = rules.map((rule, i) => [...rule.row, ...counts[i]!])
  if (otherKeys.length > 0) rows.push(['other', null, otherKeys.join(', '), null, null, ...other])
  return {
    columns: [
      'kind',
      'name',
      'tables',
      'column',
      'require_token',
      ...FENCING_CODES.map((c) => c.toLowerCase()),
    ],
    rows,
  }
}

async function stats(
  registry: SessionRegistry,
  live: ConfigInForce,
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
        registry.clientCount(),
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
  live: ConfigInForce,
  metrics: ProxyMetrics,
  pools: () => NamedPoolStats[] | null,
): ConsoleCommands {
  const tables: Record<ShowSubject, () => ConsoleTable | Promise<ConsoleTable>> = {
    clients: () => clientRows(registry),
    servers: () => serverRows(registry),
    pools: () => poolRows(registry, pools(), live.config.pool.mode),
    stats: () => stats(registry, live, metrics),
    fencing: () => fencing(live, metrics),
    config: () => ({ columns: ['key', 'value'], rows: configRows(live.config) }),
  }
  return {
    show: async (subject) => tables[subject](),
    reload: () => live.reload(registry),
  }
}
