import { parseSync } from 'libpg-query'
import { quoteLiteral } from './sql-text.js'

// Parse-tree nodes are plain JSON from the PostgreSQL parser.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Node = any

/** A parse tree for one SQL expression: templates are grafted rather than hand-built. */
export function expr(sql: string): Node {
  return parseSync(`SELECT ${sql}`).stmts[0].stmt.SelectStmt.targetList[0].ResTarget.val
}

export const and = (...args: Node[]): Node => {
  const present = args.filter((arg) => arg !== undefined)
  return present.length === 1 ? present[0] : { BoolExpr: { boolop: 'AND_EXPR', args: present } }
}

/** What the token expressions of one statement are made of. */
export interface TokenSource {
  /** Name of the session setting that holds the token. */
  setting: string
  /** SQL text of the statement's comment token: NULL, a string literal or a `$n` placeholder. */
  commentToken: string
  /** Refuse tokens above the highest one the token sequence has issued. */
  rejectUnissued: boolean
}

/**
 * SQL text of the token the statement presents, read when it executes. `names` are the
 * trailing `rel, col` arguments that name the write in errors.
 */
export function tokenCall(source: TokenSource, required: boolean, names: string): string {
  const helper = source.rejectUnissued ? 'issued_token' : 'token'
  return `pgfence.${helper}(${source.commentToken}, ${quoteLiteral(source.setting)}, ${required}, ${names})`
}
