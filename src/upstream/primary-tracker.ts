import type { UpstreamConfig } from '../config/schema.js'
import { PgError } from '../wire/error-response.js'
import { performance } from 'node:perf_hooks'
import { qualifies, SqlProbe, type NodeRole } from './node-probe.js'
import { PatroniProbe } from './patroni-probe.js'
import { listedNodes, UpstreamNode } from './upstream-node.js'
import type { ReplicationMode } from './replication-guarantee.js'

const SHUT = new PgError('57P01', 'terminating connection due to administrator command')

/** A change of the node pgfence follows as the primary (null: none qualifies now). */
export type PrimaryChange = (previous: UpstreamNode | null, next: UpstreamNode | null) => void

/** Where server connections go: the one configured node, or the primary of upstream.hosts. */
export interface Upstream {
  readonly nodes: readonly UpstreamNode[]
  /** Several nodes, one followed as the primary (false: the one fixed node). */
  readonly following: boolean
  /** The primary now (null: none known): the hot path reads this, and waits only when null. */
  current(): UpstreamNode | null
  /** The primary, waiting for one until `deadline` aborts (then rejects with its reason). */
  primary(deadline: AbortSignal): Promise<UpstreamNode>
  /** A connection to `node` failed: check the nodes now rather than at the next interval. */
  suspect(node: UpstreamNode): void
  /** Resolves after the next round of checks (at once for one fixed node). */
  nextCheck(deadline: AbortSignal): Promise<void>
  /** Called at each change of primary. */
  onChange(listener: PrimaryChange): void
  /** The replication mode of a node, as its primary reports it (null: not known). */
  replicationOf(node: UpstreamNode): Promise<ReplicationMode | null>
  close(): void
}

/** upstream.host/port: one node, always the one, never probed. */
class FixedUpstream implements Upstream {
  readonly nodes: readonly UpstreamNode[]
  readonly following = false

  constructor(config: UpstreamConfig) {
    this.nodes = [new UpstreamNode(config, true)]
  }

  /** Asked only when a session is cut with a COMMIT in flight (commitsMayWait). */
  private probe: SqlProbe | null = null

  current = () => this.nodes[0]!
  primary = async () => this.nodes[0]!
  nextCheck = async () => {}
  replicationOf = () => (this.probe ??= new SqlProbe(this.nodes[0]!)).replication()
  suspect(): void {}
  onChange(): void {}
  close(): void {
    this.probe?.close()
  }
}

interface Probe {
  role(): Promise<NodeRole>
  /** Until when (`performance.now()`) its last answer vouches for the node (Patroni's key). */
  vouchedUntil?(): number
  replication(): Promise<ReplicationMode | null>
  close(): void
}

/**
 * upstream.hosts: probes every node each primaryCheckIntervalMs (SQL, or Patroni's GET
 * /primary) and follows one primary: the current one while it still qualifies, else the first
 * that does in the listed order. With Patroni, the followed node is dropped as soon as its last
 * 200 no longer proves it holds the leader key, even while its endpoint has not answered: a
 * frozen Patroni's node gets no write by the time another node may take the key.
 */
class PrimaryTracker implements Upstream {
  readonly nodes: readonly UpstreamNode[]
  readonly following = true
  private readonly probes: Probe[]
  private readonly qualifies: (role: NodeRole) => boolean
  private followed: UpstreamNode | null = null
  private readonly listeners: PrimaryChange[] = []
  /** Woken after each round of probes. */
  private waiters = new Set<() => void>()
  private timer: NodeJS.Timeout | undefined
  /** Fires when the followed node's last answer stops vouching for it. */
  private lapse: NodeJS.Timeout | undefined
  private round: Promise<void> | null = null
  private again = false
  private closed = false

  constructor(private readonly config: UpstreamConfig) {
    this.nodes = listedNodes(config)
    const patroni = config.patroni
    this.probes = this.nodes.map((node, i) =>
      patroni ? new PatroniProbe(patroni[i]!, config.connectTimeoutMs) : new SqlProbe(node),
    )
    // Patroni's answer already is "the leader, running as primary".
    this.qualifies = patroni ? qualifies['read-write'] : qualifies[config.targetSessionAttrs]
    this.check()
  }

  current = () => this.followed

  async primary(deadline: AbortSignal): Promise<UpstreamNode> {
    while (!this.followed) await this.nextCheck(deadline)
    return this.followed
  }

  nextCheck(deadline: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.waiters.delete(wake)
        reject(deadline.aborted ? deadline.reason : SHUT)
      }
      const wake = () => {
        if (this.closed) return onAbort()
        this.waiters.delete(wake)
        deadline.removeEventListener('abort', onAbort)
        resolve()
      }
      if (deadline.aborted || this.closed) return onAbort()
      deadline.addEventListener('abort', onAbort, { once: true })
      this.waiters.add(wake)
    })
  }

  suspect(): void {
    this.check()
  }

  onChange(listener: PrimaryChange): void {
    this.listeners.push(listener)
  }

  replicationOf(node: UpstreamNode): Promise<ReplicationMode | null> {
    return this.probes[this.nodes.indexOf(node)]!.replication()
  }

  close(): void {
    this.closed = true
    clearTimeout(this.timer)
    clearTimeout(this.lapse)
    for (const probe of this.probes) probe.close()
    for (const wake of [...this.waiters]) wake()
  }

  /** One round of probes now (or right after the one running), then the next in an interval. */
  private check(): void {
    if (this.round) {
      this.again = true
      return
    }
    clearTimeout(this.timer)
    this.round = this.probeAll().finally(() => {
      this.round = null
      if (this.closed) return
      if (this.again) {
        this.again = false
        return this.check()
      }
      this.timer = setTimeout(() => this.check(), this.config.primaryCheckIntervalMs)
      this.timer.unref()
    })
  }

  private async probeAll(): Promise<void> {
    const roles = await this.answers()
    if (this.closed) return
    // An answer that came too late to vouch for the node (a thawed request) proves nothing.
    const fit = (node: UpstreamNode) => {
      const role = roles[this.nodes.indexOf(node)]
      return role !== undefined && this.qualifies(role) && this.vouched(node)
    }
    const followed = this.followed
    // A followed node that has not answered yet is kept while its last answer vouches for it,
    // unless another one is the primary.
    const keep =
      followed &&
      (fit(followed) ||
        (roles[this.nodes.indexOf(followed)] === undefined &&
          this.vouched(followed) &&
          !this.nodes.some(fit)))
    const next = keep ? followed : (this.nodes.find((node) => fit(node)) ?? null)
    if (next !== this.followed) this.follow(next)
    this.watchVouch()
    for (const wake of [...this.waiters]) wake()
  }

  private vouchedUntil(node: UpstreamNode): number {
    return this.probes[this.nodes.indexOf(node)]!.vouchedUntil?.() ?? Infinity
  }

  private vouched(node: UpstreamNode): boolean {
    return this.vouchedUntil(node) > performance.now()
  }

  /** Drops the followed node when its last answer stops vouching for it, between rounds too. */
  private watchVouch(): void {
    clearTimeout(this.lapse)
    const node = this.followed
    const until = node ? this.vouchedUntil(node) : Infinity
    if (!node || until === Infinity) return
    this.lapse = setTimeout(() => {
      if (this.closed || this.followed !== node) return
      if (this.vouched(node)) return this.watchVouch()
      this.follow(null)
      for (const wake of [...this.waiters]) wake()
    }, until - performance.now())
    this.lapse.unref()
  }

  /**
   * The role of each node as its probe answers (undefined: no answer yet). SQL: every answer.
   * Patroni: at most one interval, and no longer once a node other than the followed one holds
   * the leader key, since then the followed one does not, however long its answer takes (a
   * frozen Patroni): a round never waits for it while another node was promoted.
   */
  private answers(): Promise<(NodeRole | undefined)[]> {
    const roles: (NodeRole | undefined)[] = this.nodes.map(() => undefined)
    return new Promise((resolve) => {
      let pending = this.probes.length
      const done = () => resolve([...roles])
      if (this.config.patroni) setTimeout(done, this.config.primaryCheckIntervalMs).unref()
      this.probes.forEach((probe, i) => {
        void probe.role().then((role) => {
          roles[i] = role
          const elsewhere =
            this.config.patroni && role === 'primary' && this.nodes[i] !== this.followed
          if (--pending === 0 || elsewhere) done()
        })
      })
    })
  }

  private follow(next: UpstreamNode | null): void {
    const previous = this.followed
    if (previous) previous.primary = false
    if (next) next.primary = true
    this.followed = next
    for (const listener of this.listeners) listener(previous, next)
  }
}

/**
 * Whether a COMMIT on `node` may be waiting for a synchronous standby: unless its primary says
 * it has none configured (not known, or no node: it may).
 */
export async function commitsMayWait(
  upstream: Upstream,
  node: UpstreamNode | null,
): Promise<boolean> {
  const mode = node && (await upstream.replicationOf(node))
  return mode !== 'none' && mode !== 'asynchronous standbys'
}

/** The upstream of a config: one fixed node (host/port), or the primary of upstream.hosts. */
export const followUpstream = (config: UpstreamConfig): Upstream =>
  config.hosts ? new PrimaryTracker(config) : new FixedUpstream(config)

/** Aborts after `ms` with `reason`; its timer keeps no process alive. */
export function deadlineAfter(ms: number, reason: PgError): AbortSignal {
  const controller = new AbortController()
  setTimeout(() => controller.abort(reason), ms).unref()
  return controller.signal
}

/**
 * `connect` to the primary; when it fails to reach a node of several, waits for the next check
 * and tries the primary again until `deadline` aborts. One fixed node: one attempt, as ever.
 * A connection made to a node that stopped being the primary meanwhile is `discard`ed, not
 * returned: the change of primary ended that node's sessions before this one existed.
 */
export async function connectToPrimary<T>(
  upstream: Upstream,
  deadline: AbortSignal,
  connect: (node: UpstreamNode) => Promise<T>,
  discard: (connection: T) => void,
): Promise<T> {
  for (;;) {
    const node = upstream.current() ?? (await upstream.primary(deadline))
    let connection: T
    try {
      connection = await connect(node)
    } catch (err) {
      const unreachable = err instanceof PgError && err.code === '08006'
      if (!upstream.following || !unreachable || deadline.aborted) throw err
      upstream.suspect(node)
      await upstream.nextCheck(deadline)
      continue
    }
    if (node.primary || !upstream.following) return connection
    discard(connection)
  }
}
