import { sqlFile } from './sql-file.js'
import { triggerNameValues } from './trigger-names.js'

/**
 * Tables that join a fenced table's tree later (sql/fence-descendants.sql): the records of what
 * migrate fenced, the view of the descendants that lack their triggers, and the event trigger
 * that fences them.
 */
export const fenceDescendantsSql = sqlFile('fence-descendants', triggerNameValues)

/** Records one fenced table for the event trigger; the arguments are those of fence_table. */
export const recordRowFenceSql = (args: (string | boolean)[]): string =>
  `SELECT pgfence.record_row_fence(${args.join(', ')});`
