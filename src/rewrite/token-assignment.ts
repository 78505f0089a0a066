import { expr, type Node, type TokenSource } from './ast.js'
import type { Target } from './fence-target.js'
import { tokenize } from './lexer.js'
import { quoteIdent } from './sql-text.js'

/** `fence = <comment token>`, to go first in the SET list of the UPDATE whose first target is at `at`. */
export interface TokenAssignment {
  /** Offset of the UPDATE's first SET target, as the parser reports it (UTF-8 bytes). */
  at: number
  sql: string
}

/**
 * An UPDATE of a triggered table with a valid comment token sets the fence column to that token,
 * which the statement marker also carries: the fence trigger then admits each row whose new
 * value is the token's text as it stands, with neither a digit check nor an assignment
 * (fence-triggers.ts), where a row the token raises would take both. The trigger still compares
 * it with the committed token. The assignment goes into the tree (for a statement that is
 * deparsed anyway) and is returned for splicing into the text, which keeps the statement as the
 * client wrote it, comments included.
 */
export function assignCommentToken(
  node: Node,
  t: Target,
  source: TokenSource & { commentTokenValid: boolean },
): TokenAssignment | undefined {
  if (!source.commentTokenValid || source.rejectUnissued) return undefined
  node.targetList.push({ ResTarget: { name: t.table.column, val: expr(source.commentToken) } })
  return {
    at: node.targetList[0].ResTarget.location,
    sql: `${quoteIdent(t.table.column)} = ${source.commentToken}`,
  }
}

/**
 * The statement at `start`..`end` of `text` with each assignment put right after the SET keyword
 * before its UPDATE's first target (so that `SET (a, b) = ...` stays whole). `offsets` maps the
 * parser's byte offsets to string indexes.
 */
export function spliceAssignments(
  text: string,
  start: number,
  end: number,
  assignments: TokenAssignment[],
  offsets: (byteOffset: number) => number,
): string {
  const statement = text.slice(start, end)
  const sets = tokenize(statement).filter(
    (token) =>
      token.kind === 'word' && statement.slice(token.start, token.end).toLowerCase() === 'set',
  )
  const targets = assignments.map(({ at, sql }) => ({ at: offsets(at) - start, sql }))
  let out = statement
  for (const { at, sql } of targets.sort((a, b) => b.at - a.at)) {
    const set = sets.findLast((token) => token.end <= at)
    if (!set) throw new Error('UPDATE without SET')
    out = `${out.slice(0, set.end)} ${sql},${out.slice(set.end)}`
  }
  return out
}
