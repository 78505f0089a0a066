import { inheritanceWalk } from './inheritance-walk.js'
import { refusalLiterals } from './refusal-literals.js'
import { sqlFile } from './sql-file.js'
import { EPOCH_TAG } from './token-layout.js'

/**
 * The PL/pgSQL helpers (sql/helpers.sql) that the fence triggers, the resource gates and the
 * proxy's own compare-and-raise (for tables without their trigger, fence-rewrite.ts) call, with
 * pgfence.inheritance_tree, the one walk of a table's partitions and inheritance children.
 */
export const fenceHelpersSql = sqlFile('helpers', {
  ...refusalLiterals,
  epoch_tag: EPOCH_TAG,
  inheritance_walk: inheritanceWalk('pg_catalog.unnest(roots) AS r'),
})
