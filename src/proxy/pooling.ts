import { createCredentialSource } from '../auth/credential-source.js'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import { CancelKeys } from '../pool/cancel-keys.js'
import { PoolRegistry, type PoolObservers } from '../pool/pool-registry.js'
import type { PoolingContext } from './pooled-startup.js'
import type { Upstream } from '../upstream/primary-tracker.js'

/** What a pooling proxy shares across its clients; null when pool.mode is none. */
export function createPooling(
  config: Config,
  upstream: Upstream,
  logger: Logger,
  observers: PoolObservers,
): PoolingContext | null {
  if (config.pool.mode === 'none') return null
  return {
    credentials: createCredentialSource(config.auth, upstream),
    pools: new PoolRegistry(config, upstream, logger, observers),
    cancelKeys: new CancelKeys(),
    resetTimeoutMs: config.upstream.connectTimeoutMs,
  }
}
