import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { createFencingRewriter } from './fencing.js'
import { createNativeQueryCache } from './native-query-cache.js'
import { nativeRelayModule, type NativeQueryCache } from './native-relay.js'
import { TableNameChecks } from './table-name-checks.js'

/** What sessions apply to each statement; a config reload replaces it whole. */
export interface SessionSettings {
  readonly rewriter: StatementRewriter | null
  /** The native relay's Query templates, made from this rewriter. */
  readonly queryCache: NativeQueryCache | null
  readonly limits: Config['limits']
  /** The configured names checked in each database; null when fencing was not made from them. */
  readonly nameChecks: TableNameChecks | null
}

/** The settings in force: sessions keep the holder, never the settings, so a reload reaches them. */
export interface SettingsHolder {
  current: SessionSettings
}

export interface SettingsOptions {
  /** Replaces the rewriter made from `config.fencing` (null: every statement passes through). */
  rewriter?: StatementRewriter | null
  /** Query templates the native relay keeps. */
  queryCacheSize?: number
}

/** The settings a config gives; `nativeRelay`: sessions may be relayed natively. */
export async function sessionSettings(
  config: Config,
  nativeRelay: boolean,
  logger: Logger,
  options: SettingsOptions = {},
): Promise<SessionSettings> {
  const rewriter =
    options.rewriter !== undefined ? options.rewriter : await createFencingRewriter(config)
  const queryCache =
    nativeRelay && rewriter ? createNativeQueryCache(rewriter, options.queryCacheSize) : null
  // Only for fencing made from the config: its names are what the databases must resolve.
  const nameChecks =
    options.rewriter === undefined && rewriter ? new TableNameChecks(config.fencing, logger) : null
  return { rewriter, queryCache, limits: config.limits, nameChecks }
}

/**
 * The settings of one database's sessions: those in force, unless the configured names do not
 * all resolve there, when its own rewriter refuses writes to their look-alikes.
 */
export function settingsForDatabase(holder: SettingsHolder, database: string): SettingsHolder {
  return {
    get current() {
      const settings = holder.current
      const own = settings.nameChecks?.rewriterFor(database)
      return own ? { ...settings, rewriter: own, queryCache: null } : settings
    },
  }
}

export interface CacheLookups {
  hits: number
  misses: number
}

/** Lookups in both rewrite caches of one set of settings so far. */
export function cacheLookups({ rewriter, queryCache }: SessionSettings): CacheLookups {
  const own = rewriter?.cacheLookups?.() ?? { hits: 0, misses: 0 }
  const native =
    queryCache && nativeRelayModule
      ? nativeRelayModule.queryCacheStats(queryCache)
      : { hits: 0, misses: 0 }
  return { hits: own.hits + native.hits, misses: own.misses + native.misses }
}
