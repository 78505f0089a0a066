import { performance } from 'node:perf_hooks'
import type { NodeRole } from './node-probe.js'
import type { ReplicationMode } from './replication-guarantee.js'

/** Patroni's defaults (seconds) for the timings its dynamic configuration leaves out. */
const PATRONI_DEFAULTS = { ttl: 30, loop_wait: 10, retry_timeout: 10 }
/** How often the timings are read again (GET /config) while the node answers 200. */
const TIMINGS_REFRESH_MS = 30_000

type Timings = typeof PATRONI_DEFAULTS

/**
 * How long a 200 of GET /primary proves the key is still held, counted from when its request
 * was sent. A leader that answers 200 renewed the key at most loop_wait + retry_timeout earlier
 * (else it would have demoted), and a renewal keeps the key for ttl: so the key is held until
 * at least ttl − loop_wait − retry_timeout after the answer, which Patroni's own rule
 * (loop_wait + 2 × retry_timeout ≤ ttl) keeps at retry_timeout or more.
 */
export function keyHeldForMs(timings: Partial<Timings>): number {
  const { ttl, loop_wait, retry_timeout } = { ...PATRONI_DEFAULTS, ...timings }
  const seconds = ttl - loop_wait - retry_timeout
  // Timings that break Patroni's rule: what the rule would guarantee.
  return seconds > 0 ? seconds * 1000 : retry_timeout * 1000
}

/**
 * Patroni's REST API: GET /primary answers 200 on the node that holds the leader key. One
 * request at a time: a node slow to answer (a frozen Patroni) is asked once, however many
 * rounds of checks pass meanwhile. A 200 vouches for the node only until the key it proves
 * may have expired (keyHeldForMs), so a Patroni that stops answering stops vouching before
 * another node can take the key.
 */
export class PatroniProbe {
  private asking: Promise<NodeRole> | null = null
  /** `performance.now()` when the request of the last 200 was sent (null: the last answer was not 200). */
  private confirmedAt: number | null = null
  private heldForMs = keyHeldForMs({})
  private timingsReadAt = -Infinity

  constructor(
    private readonly url: string,
    private readonly timeoutMs: number,
  ) {}

  role(): Promise<NodeRole> {
    this.asking ??= this.ask().finally(() => (this.asking = null))
    return this.asking
  }

  /** Until when (`performance.now()`) the last answer proves the node holds the key (0: never). */
  vouchedUntil(): number {
    return this.confirmedAt === null ? 0 : this.confirmedAt + this.heldForMs
  }

  /** Patroni's REST API does not say; the database does (pgfence migrate states it). */
  async replication(): Promise<ReplicationMode | null> {
    return null
  }

  close(): void {}

  private async ask(): Promise<NodeRole> {
    const sent = performance.now()
    const status = await this.get('primary')
    this.confirmedAt = status === 200 ? sent : null
    if (status === 200 && sent - this.timingsReadAt > TIMINGS_REFRESH_MS) void this.readTimings()
    return status === 200 ? 'primary' : status === 0 ? 'down' : 'standby'
  }

  /** GET /config: the cluster's ttl, loop_wait and retry_timeout (absent ones: the defaults). */
  private async readTimings(): Promise<void> {
    this.timingsReadAt = performance.now()
    try {
      const response = await fetch(this.endpoint('config'), {
        signal: AbortSignal.timeout(this.timeoutMs),
      })
      if (response.status !== 200) {
        await response.arrayBuffer()
        return
      }
      const config = (await response.json()) as Partial<Record<keyof Timings, unknown>>
      const timings: Partial<Timings> = {}
      for (const key of Object.keys(PATRONI_DEFAULTS) as (keyof Timings)[]) {
        const value = Number(config[key])
        if (config[key] !== undefined && Number.isFinite(value)) timings[key] = value
      }
      this.heldForMs = keyHeldForMs(timings)
    } catch {
      // Kept: the timings last read (or Patroni's defaults); read again after the next 200.
      this.timingsReadAt = -Infinity
    }
  }

  /** The status of GET `path` (0: no answer within timeoutMs). */
  private async get(path: string): Promise<number> {
    try {
      const response = await fetch(this.endpoint(path), {
        signal: AbortSignal.timeout(this.timeoutMs),
      })
      await response.arrayBuffer()
      return response.status
    } catch {
      return 0
    }
  }

  private endpoint(path: string): URL {
    return new URL(path, this.url.endsWith('/') ? this.url : `${this.url}/`)
  }
}
