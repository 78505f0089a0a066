import type { Config } from '../config/schema.js'
import { createRewriter } from '../rewrite/rewriter.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'

/** A config that names no fenced table and no resource: every statement passes through. */
export const fencesNothing = (fencing: Config['fencing']): boolean =>
  fencing.tables.length === 0 && fencing.resources.length === 0

/**
 * The fencing rewriter for a config, or null when nothing is fenced (pure pass-through). It
 * knows of no fence trigger, so it checks every fenced table's rows in the statement itself;
 * the rewriters of checked databases (table-name-checks.ts) leave them to the triggers.
 */
export async function createFencingRewriter(config: Config): Promise<StatementRewriter | null> {
  if (fencesNothing(config.fencing)) return null
  return createRewriter(config.fencing, 'none')
}
