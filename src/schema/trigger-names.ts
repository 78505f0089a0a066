import { quoteLiteral } from '../rewrite/sql-text.js'
import type { SqlValues } from './sql-file.js'

/** The row trigger that checks every write to a fenced table's rows (sql/fence-triggers.sql). */
export const rowFenceTrigger = 'pgfence_fence_row'
/** The statement trigger that refuses TRUNCATE of a fenced table. */
export const truncateFenceTrigger = 'pgfence_fence_truncate'
/** The triggers every member of a row-fenced table's tree has once fenced. */
export const rowFenceTriggers = [truncateFenceTrigger, rowFenceTrigger]
/** The statement triggers that gate every write to a member table of a fixed resource. */
export const resourceGateTrigger = 'pgfence_resource_gate'
/** And of a fixed resource's member table (sql/resource-gates.sql). */
export const resourceGateTriggers = [resourceGateTrigger, `${resourceGateTrigger}_truncate`]
/** The event trigger that fences tables joining a fenced table's tree after `pgfence migrate`. */
export const descendantsTriggerName = 'pgfence_fence_descendants'

/** A text[] literal. */
export const sqlArray = (items: string[]): string => `ARRAY[${items.map(quoteLiteral).join(', ')}]`

/** The names as the SQL files use them: literals, arrays, and the event trigger's identifier. */
export const triggerNameValues: SqlValues = {
  row_fence_trigger: quoteLiteral(rowFenceTrigger),
  truncate_fence_trigger: quoteLiteral(truncateFenceTrigger),
  row_fence_triggers: sqlArray(rowFenceTriggers),
  resource_gate_trigger: quoteLiteral(resourceGateTriggers[0]!),
  resource_gate_truncate_trigger: quoteLiteral(resourceGateTriggers[1]!),
  resource_gate_triggers: sqlArray(resourceGateTriggers),
  descendants_trigger: descendantsTriggerName,
}
