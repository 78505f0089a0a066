import type { CommentKeys } from './normalise.js'
import type { Template } from './template.js'

/**
 * What the proxy asks of the SQL rewrite layer. Refusals are rewritten too (into a statement
 * that raises the SQLSTATE inside PostgreSQL), so the proxy itself never answers for the server.
 */
export interface StatementRewriter {
  /** Simple-protocol Query text; null means forward the original bytes unchanged. */
  rewriteQuery(sql: string): string | null
  /**
   * The rewrite template of a Query text normalised as src/rewrite/normalise.ts does it (with
   * no parameters of its own), for a cache outside the rewriter: undefined when such texts pass
   * unchanged, null when only each exact text can be rewritten (through rewriteQuery).
   */
  templateForQuery?(text: string): Template | null | undefined
  /** The comment keys that normalisation reads values of. */
  readonly commentKeys?: CommentKeys
  /** Extended-protocol Parse text; null means forward the original bytes unchanged. */
  rewriteParse(sql: string): string | null
  /**
   * Lower-case texts of which a statement must contain one (in any letter case) for a rewrite
   * to change it; absent: any statement may change.
   */
  readonly prefilterNeedles?: readonly string[]
  /**
   * The rewriter for a session in which pgfence.maintenance may be on: a write to the fence
   * column of a table with its fence trigger passes, for the trigger to decide (see
   * fence-target.ts). Absent: such sessions are rewritten as any other.
   */
  readonly underMaintenance?: StatementRewriter
  /** Lookups in the rewriter's own cache so far. */
  cacheLookups?(): { hits: number; misses: number }
}
