import type { Config } from '../config/schema.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { createFencingRewriter } from './fencing.js'
import { createNativeQueryCache } from './native-query-cache.js'
import { nativeRelayModule, type NativeQueryCache } from './native-relay.js'

/** What sessions apply to each statement; a config reload replaces it whole. */
export interface SessionSettings {
  readonly rewriter: StatementRewriter | null
  /** The native relay's Query templates, made from this rewriter. */
  readonly queryCache: NativeQueryCache | null
  readonly limits: Config['limits']
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
  options: SettingsOptions = {},
): Promise<SessionSettings> {
  const rewriter =
    options.rewriter !== undefined ? options.rewriter : await createFencingRewriter(config)
  const queryCache =
    nativeRelay && rewriter ? createNativeQueryCache(rewriter, options.queryCacheSize) : null
  return { rewriter, queryCache, limits: config.limits }
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
