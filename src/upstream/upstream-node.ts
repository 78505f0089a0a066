import type { UpstreamConfig } from '../config/schema.js'
import { parseHostPort } from '../config/host-port.js'

/**
 * One PostgreSQL node: the upstream config with its host and port (what connectUpstream takes),
 * and whether pgfence follows it as the primary now. A server connection is lent only while its
 * node is the primary, so flipping `primary` retires every connection to the node at once.
 */
export class UpstreamNode {
  readonly name: string

  constructor(
    readonly config: UpstreamConfig,
    public primary: boolean,
  ) {
    this.name = `${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.port}`
  }
}

/** The nodes of upstream.hosts, in their order (libpq's), none of them the primary yet. */
export const listedNodes = (upstream: UpstreamConfig): UpstreamNode[] =>
  (upstream.hosts ?? []).map(
    (text) => new UpstreamNode({ ...upstream, ...parseHostPort(text) }, false),
  )
