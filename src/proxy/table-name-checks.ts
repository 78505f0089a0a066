import type { FencingConfig } from '../config/schema.js'
import type { Logger } from '../log.js'
import { FencingRewriter } from '../rewrite/rewriter.js'
import {
  candidateRow,
  candidatesSql,
  configuredNames,
  resolveNames,
  type ConfiguredName,
} from '../schema/resolve-tables.js'
import { decodeQueryResult } from '../wire/query-result.js'
import type { LoginQuery } from './login-query.js'

/** How often a database's names are resolved again (a session's login pays one round trip). */
const RECHECK_MS = 60_000

interface DatabaseNames {
  /** When the last check started: a check whose session died is simply retried later. */
  checkedAt: number
  /** The problems logged for this database, so that each is logged once. */
  reported: Set<string>
  /** Unresolved names as one key, to keep the rewriter (and its cache) while they stay. */
  unresolvedKey: string
  /** Refuses writes to look-alikes of unresolved names; null: the proxy's own rewriter. */
  rewriter: FencingRewriter | null
}

/**
 * The configured table names, resolved in each database that sessions use, off the statement
 * path: the first session of a database (and one a minute after that) runs the catalog query
 * at login. A name that does not resolve is logged at error once, and the database's sessions
 * get a rewriter that refuses writes to tables spelled like it in another letter case.
 */
export class TableNameChecks {
  private readonly names: ConfiguredName[]
  private readonly sql: string
  private readonly databases = new Map<string, DatabaseNames>()

  constructor(
    private readonly fencing: FencingConfig,
    private readonly logger: Logger,
    private readonly recheckMs = RECHECK_MS,
  ) {
    this.names = configuredNames(fencing)
    this.sql = candidatesSql(this.names)
  }

  /** The rewriter for a database whose names do not all resolve; null when they do. */
  rewriterFor(database: string): FencingRewriter | null {
    return this.databases.get(database)?.rewriter ?? null
  }

  /** The check for a session logging in to this database to run, when one is due. */
  loginQuery(database: string): LoginQuery | null {
    if (this.names.length === 0) return null
    let state = this.databases.get(database)
    if (state === undefined) {
      state = { checkedAt: -Infinity, reported: new Set(), unresolvedKey: '', rewriter: null }
      this.databases.set(database, state)
    }
    const now = Date.now()
    if (now - state.checkedAt < this.recheckMs) return null
    state.checkedAt = now
    const checked = state
    return { sql: this.sql, done: (messages) => this.record(database, checked, messages) }
  }

  private record(database: string, state: DatabaseNames, messages: Buffer[]): void {
    const { rows, error } = decodeQueryResult(messages)
    if (error) {
      this.logger.warn({ database, err: error.message }, 'could not check fenced table names')
      return
    }
    const { problems } = resolveNames(this.names, rows.map(candidateRow))
    const messagesNow = new Set(problems.map((problem) => problem.message))
    for (const problem of problems) {
      if (!state.reported.has(problem.message))
        this.logger.error({ database, table: problem.text }, problem.message)
    }
    state.reported = messagesNow
    const unresolved = problems.filter((problem) => problem.unresolved)
    const key = unresolved.map((problem) => problem.text).join('\0')
    if (key === state.unresolvedKey) return
    state.unresolvedKey = key
    state.rewriter =
      unresolved.length === 0 ? null : new FencingRewriter(this.fencing, 4096, unresolved)
  }
}
