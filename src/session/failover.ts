import type { Logger } from '../log.js'
import type { PoolRegistry } from '../pool/pool-registry.js'
import type { Upstream } from '../upstream/primary-tracker.js'
import type { UpstreamNode } from '../upstream/upstream-node.js'
import type { SessionRegistry } from './session-registry.js'
import { guaranteeLine } from '../upstream/replication-guarantee.js'

/**
 * What a change of primary does to the proxy: sessions on the node that stopped being the
 * primary end (08006, 08007 with a statement in flight that may commit), pooled connections to
 * it close, the change is logged once and counted as a failover when another node takes over.
 */
export function followFailovers(
  upstream: Upstream,
  registry: SessionRegistry,
  pools: PoolRegistry | null,
  countFailover: () => void,
  logger: Logger,
): void {
  /** The last node followed as the primary: A → none → A is no failover, A → none → B is. */
  let last: UpstreamNode | null = null
  upstream.onChange((previous, next) => {
    const failover = next !== null && last !== null && next !== last
    if (next) void logPrimary(upstream, next, last, failover, logger)
    else logger.error({ previous: previous?.name }, 'no upstream primary: new connections wait')
    if (failover) countFailover()
    if (next) last = next
    // Sessions on every other node end: the previous primary's, and any that reached a node
    // just as it stopped being followed.
    for (const node of upstream.nodes) {
      if (node === next) continue
      for (const session of [...registry.on(node)]) void session.cut('failover')
    }
    pools?.sweep()
  })
}

/** The one line of a new primary, with what its replication guarantees. */
async function logPrimary(
  upstream: Upstream,
  next: UpstreamNode,
  last: UpstreamNode | null,
  failover: boolean,
  logger: Logger,
): Promise<void> {
  const mode = await upstream.replicationOf(next)
  logger[failover ? 'warn' : 'info'](
    { primary: next.name, previous: last?.name ?? null, ...(mode && { replication: mode }) },
    mode ? `upstream primary; ${guaranteeLine(mode)}` : 'upstream primary',
  )
}
