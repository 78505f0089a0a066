/**
 * What the proxy asks of the SQL rewrite layer. Refusals are rewritten too (into a statement
 * that raises the SQLSTATE inside PostgreSQL), so the proxy itself never answers for the server.
 */
export interface StatementRewriter {
  /** Simple-protocol Query text; null means forward the original bytes unchanged. */
  rewriteQuery(sql: string): string | null
  /** Extended-protocol Parse text; null means forward the original bytes unchanged. */
  rewriteParse(sql: string): string | null
  /**
   * Lower-case texts of which a statement must contain one (in any letter case) for a rewrite
   * to change it; absent: any statement may change.
   */
  readonly prefilterNeedles?: readonly string[]
}
