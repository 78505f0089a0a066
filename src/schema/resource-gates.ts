import { effectiveTokenSql } from './fence-triggers.js'
import { quoteLiteral } from '../rewrite/sql-text.js'
import { enteredSetting } from './resource-fences.js'
import { sqlFile } from './sql-file.js'
import { triggerNameValues } from './trigger-names.js'

/** Gates one member table (and its tree) of a fixed resource: gate_table's arguments. */
export const gateTableSql = (args: (string | boolean)[]): string =>
  `SELECT pgfence.gate_table(${args.join(', ')});`

/**
 * The resource fence on every write path (sql/resource-gates.sql): statement-level triggers on
 * each member table of a fixed resource, and on its partitions and inheritance children.
 */
export const resourceGatesSql = sqlFile('resource-gates', {
  ...triggerNameValues,
  effective_token: effectiveTokenSql('setting'),
  effective_token_format: effectiveTokenSql('%L'),
  entered_setting: quoteLiteral(enteredSetting),
})
