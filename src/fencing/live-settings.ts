import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { createFencingRewriter } from './fencing.js'
import { createNativeQueryCache } from '../relay/native-query-cache.js'
import { nativeRelayModule, type NativeQueryCache } from '../relay/native-relay.js'
import { TableNameChecks, type DatabaseFencing } from './table-name-checks.js'

/** What sessions apply to each statement; a config reload replaces it whole. */
export interface SessionSettings {
  readonly rewriter: StatementRewriter | null
  /** The native relay's Query templates, made from this rewriter. */
  readonly queryCache: NativeQueryCache | null
  /** The config in force, which these settings were made from. */
  readonly config: Config
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
    options.rewriter === undefined && rewriter
      ? new TableNameChecks(config.fencing, logger, (own) =>
          nativeRelay ? createNativeQueryCache(own, options.queryCacheSize) : null,
        )
      : null
  return { rewriter, queryCache, config, nameChecks }
}

/**
 * The settings of one database's sessions: once its check has run, its own rewriter, which
 * leaves the rows of tables with their fence trigger to it and refuses writes to look-alikes of
 * names that do not resolve there; until then, those in force.
 */
export function settingsForDatabase(holder: SettingsHolder, database: string): SettingsHolder {
  return new DatabaseSettings(holder, database)
}

/**
 * A class, not an object literal with a getter (which V8 turns into a dictionary per object),
 * that merges the database's own fencing into the settings once per change, not per statement:
 * each merge is a new object of a new hidden class (see relaySession).
 */
class DatabaseSettings implements SettingsHolder {
  private merged: {
    from: SessionSettings
    own: DatabaseFencing
    settings: SessionSettings
  } | null = null

  constructor(
    private readonly holder: SettingsHolder,
    private readonly database: string,
  ) {}

  get current(): SessionSettings {
    const from = this.holder.current
    const own = from.nameChecks?.fencingFor(this.database)
    if (!own) return from
    const merged = this.merged
    if (merged?.from === from && merged.own === own) return merged.settings
    const settings = { ...from, ...own }
    this.merged = { from, own, settings }
    return settings
  }
}

export interface CacheLookups {
  hits: number
  misses: number
}

/** Lookups in the rewrite caches (the rewriter's and the native relay's) of one set of settings. */
export function cacheLookups(settings: SessionSettings): CacheLookups {
  const total = { hits: 0, misses: 0 }
  for (const { rewriter, queryCache } of [
    settings,
    ...(settings.nameChecks?.checkedFencings() ?? []),
  ]) {
    const own = rewriter?.cacheLookups?.() ?? { hits: 0, misses: 0 }
    const native =
      queryCache && nativeRelayModule
        ? nativeRelayModule.queryCacheStats(queryCache)
        : { hits: 0, misses: 0 }
    total.hits += own.hits + native.hits
    total.misses += own.misses + native.misses
  }
  return total
}
