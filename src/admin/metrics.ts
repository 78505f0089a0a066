import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { PoolObserver } from '../pool/pool.js'
import type { NamedPoolStats } from '../pool/pool-registry.js'

/** Figures read from the proxy when Prometheus scrapes, so that counting costs the data path nothing. */
export interface ProxyFigures {
  /** Client connections by state (startup, idle, active, in_transaction). */
  clientConnections(): Record<string, number>
  /** Server connections by state (login, active; a pool adds idle). */
  serverConnections(): Record<string, number>
  nativeRelaySessions(): number
  /** Transactions ended since start (ReadyForQuery idle), single statements included. */
  transactions(): number
  /** Lookups in the rewrite caches (the rewriter's and the native relay's) since start. */
  rewriteCacheLookups(): { hits: number; misses: number }
  /** Each pool's figures (none when pool.mode is none). */
  pools(): NamedPoolStats[]
  /** Each upstream node (host:port) and whether pgfence follows it as the primary now. */
  upstreamNodes(): readonly { name: string; primary: boolean }[]
}

type PoolLabel = 'database' | 'user'
const POOL_LABELS: PoolLabel[] = ['database', 'user']
/** Waits for a server connection: from a queue that barely forms to pool.waitTimeoutMs. */
const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30]

/** A label set with every state present, so that a state that empties reads 0, not absent. */
function setStates(gauge: Gauge<'state'>, states: Record<string, number>): void {
  gauge.reset()
  for (const [state, count] of Object.entries(states)) gauge.set({ state }, count)
}

/** The pools' state, read at scrape time. */
function poolGauges(figures: ProxyFigures, registers: Registry[]): void {
  new Gauge({
    name: 'pgfence_pool_clients_waiting',
    help: 'Clients queued for a server connection, by pool',
    labelNames: POOL_LABELS,
    registers,
    collect() {
      this.reset()
      for (const { database, user, waiting } of figures.pools())
        this.set({ database, user }, waiting)
    },
  })
  new Gauge({
    name: 'pgfence_pool_max_wait_seconds',
    help: 'How long the first client in a pool queue has waited so far',
    labelNames: POOL_LABELS,
    registers,
    collect() {
      this.reset()
      for (const { database, user, maxWaitMs } of figures.pools())
        this.set({ database, user }, maxWaitMs / 1000)
    },
  })
  new Gauge({
    name: 'pgfence_pool_server_connections',
    help: 'Server connections of a pool by state (active: lent, idle, login)',
    labelNames: [...POOL_LABELS, 'state'],
    registers,
    collect() {
      this.reset()
      for (const { database, user, active, idle, login } of figures.pools()) {
        this.set({ database, user, state: 'active' }, active)
        this.set({ database, user, state: 'idle' }, idle)
        this.set({ database, user, state: 'login' }, login)
      }
    },
  })
}

/**
 * The proxy's Prometheus series, in a registry of its own (several proxies may share a process).
 * Rare events (a fencing rejection, a failed upstream connect) are counted as they happen;
 * everything else is read from the proxy at scrape time.
 */
export class ProxyMetrics {
  readonly registry = new Registry()
  private readonly rejections: Counter<'code' | 'table'>
  private readonly connectFailures: Counter
  private readonly poolWaits: Histogram<PoolLabel>
  private readonly poolWaitTimeouts: Counter<PoolLabel>
  private readonly failovers: Counter

  /** `processDefaults`: also prom-client's process series (they watch GC and the event loop). */
  constructor(figures: ProxyFigures, processDefaults: boolean) {
    const registers = [this.registry]
    if (processDefaults) collectDefaultMetrics({ register: this.registry })
    this.rejections = new Counter({
      name: 'pgfence_fencing_rejections_total',
      help: 'Writes refused by a fence, by SQLSTATE and table (schema.table)',
      labelNames: ['code', 'table'],
      registers,
    })
    this.connectFailures = new Counter({
      name: 'pgfence_upstream_connect_failures_total',
      help: 'Connections to the upstream server that failed or timed out',
      registers,
    })
    new Gauge({
      name: 'pgfence_client_connections',
      help: 'Client connections by state',
      labelNames: ['state'],
      registers,
      collect() {
        setStates(this, figures.clientConnections())
      },
    })
    new Gauge({
      name: 'pgfence_server_connections',
      help: 'Server connections by state',
      labelNames: ['state'],
      registers,
      collect() {
        setStates(this, figures.serverConnections())
      },
    })
    new Gauge({
      name: 'pgfence_native_relay_sessions',
      help: 'Sessions relayed by the native relay now',
      registers,
      collect() {
        this.set(figures.nativeRelaySessions())
      },
    })
    new Counter({
      name: 'pgfence_transactions_total',
      help: 'Transactions ended (ReadyForQuery idle), single statements included',
      registers,
      collect() {
        this.reset()
        this.inc(figures.transactions())
      },
    })
    new Counter({
      name: 'pgfence_rewrite_cache_lookups_total',
      help: 'Lookups in the statement rewrite caches, by result (hit, miss)',
      labelNames: ['result'],
      registers,
      collect() {
        const { hits, misses } = figures.rewriteCacheLookups()
        this.reset()
        this.inc({ result: 'hit' }, hits)
        this.inc({ result: 'miss' }, misses)
      },
    })
    this.poolWaits = new Histogram({
      name: 'pgfence_pool_wait_seconds',
      help: 'Time clients waited in a pool queue for a server connection (those that waited)',
      labelNames: POOL_LABELS,
      buckets: WAIT_BUCKETS,
      registers,
    })
    this.poolWaitTimeouts = new Counter({
      name: 'pgfence_pool_wait_timeouts_total',
      help: 'Clients that gave up after pool.waitTimeoutMs in a pool queue',
      labelNames: POOL_LABELS,
      registers,
    })
    poolGauges(figures, registers)
    new Gauge({
      name: 'pgfence_upstream_primary',
      help: 'Upstream nodes by host:port: 1 for the primary server connections go to, else 0',
      labelNames: ['host'],
      registers,
      collect() {
        this.reset()
        for (const { name, primary } of figures.upstreamNodes())
          this.set({ host: name }, primary ? 1 : 0)
      },
    })
    this.failovers = new Counter({
      name: 'pgfence_failovers_total',
      help: 'Changes of the upstream primary to another node',
      registers,
    })
  }

  failover(): void {
    this.failovers.inc()
  }

  /** Counts the waits of the pool of one (database, user). */
  poolObserver(database: string, user: string): PoolObserver {
    const waits = this.poolWaits.labels({ database, user })
    const timeouts = this.poolWaitTimeouts.labels({ database, user })
    return { waited: (seconds) => waits.observe(seconds), timedOut: () => timeouts.inc() }
  }

  rejection(code: string, table: string): void {
    this.rejections.inc({ code, table })
  }

  upstreamConnectFailed(): void {
    this.connectFailures.inc()
  }

  async upstreamConnectFailures(): Promise<number> {
    return (await this.connectFailures.get()).values[0]?.value ?? 0
  }

  /** Rejections so far by table, then by SQLSTATE. */
  async rejectionsByTable(): Promise<Map<string, Map<string, number>>> {
    const byTable = new Map<string, Map<string, number>>()
    for (const { labels, value } of (await this.rejections.get()).values) {
      const table = String(labels.table)
      if (!byTable.has(table)) byTable.set(table, new Map())
      byTable.get(table)!.set(String(labels.code), value)
    }
    return byTable
  }
}
