import { createCredentialSource } from '../auth/credential-source.js'
import type { Logger } from '../log.js'
import { CancelKeys } from '../pool/cancel-keys.js'
import { PoolRegistry, type PoolObservers } from '../pool/pool-registry.js'
import type { LiveConfig } from './live-config.js'
import type { PoolingContext } from '../session/pooled-startup.js'
import type { Upstream } from '../upstream/primary-tracker.js'

/**
 * What a pooling proxy shares across its clients; null when pool.mode is none. A reload reads
 * auth's user list again (an unreadable one refuses the reload) and resizes the pools.
 */
export function createPooling(
  live: LiveConfig,
  upstream: Upstream,
  logger: Logger,
  observers: PoolObservers,
): PoolingContext | null {
  const { config } = live
  if (config.pool.mode === 'none') return null
  const pooling: PoolingContext = {
    credentials: createCredentialSource(config.auth, upstream),
    pools: new PoolRegistry(live, upstream, logger, observers),
    cancelKeys: new CancelKeys(),
    ownStatementTimeoutMs: config.upstream.connectTimeoutMs,
  }
  live.onReload((next) => {
    const credentials = createCredentialSource(next.auth, upstream)
    return () => {
      pooling.credentials = credentials
      pooling.pools.reconfigure()
    }
  })
  return pooling
}
