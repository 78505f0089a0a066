import { statementTokenPrefix } from '../rewrite/statement-marker.js'
import { defaultTokenSetting } from '../config/schema.js'
import { quoteLiteral } from '../rewrite/sql-text.js'
import { refusalLiterals } from './refusal-literals.js'
import { sqlFile } from './sql-file.js'
import { EPOCH_TAG, SEQUENCE_SPAN } from './token-layout.js'
import { currentTimelineSql } from './token-source.js'
import { triggerNameValues } from './trigger-names.js'

/** The role whose members (and superusers) may write fenced tables with maintenance on. */
export const maintenanceRole = 'pgfence_maintenance'

/**
 * The value of the proxy's statement marker, from the very start of the statement text (where it
 * cannot sit inside a literal): the prefix ends with the text's first quote, so the value runs
 * to the second. Built-ins only, and no regular expression, which costs per byte of the text.
 */
const markerValueSql = `CASE WHEN pg_catalog.starts_with(pg_catalog.current_query(), ${quoteLiteral(
  statementTokenPrefix,
)}) THEN pg_catalog.split_part(pg_catalog.current_query(), '''', 2) END`

/**
 * The token a statement presents, as a trigger reads it: the proxy's marker, else the session
 * setting. `setting` is SQL text of the setting's name.
 */
export const effectiveTokenSql = (setting: string): string =>
  `coalesce(${markerValueSql}, pg_catalog.current_setting(${setting}, true))`

/**
 * The name of the row trigger function of a fence column, token setting and
 * rejectUnissuedTokens (SQL text of each): `fence_<column>` for the default setting, else (or
 * when that is too long for a name) `fence_` and an md5 of the three.
 */
export const rowFunctionNameSql = (col: string, setting: string, unissued: string): string =>
  `CASE WHEN ${setting} = ${quoteLiteral(defaultTokenSetting)} AND NOT ${unissued}
    AND pg_catalog.octet_length(${col}) <= 57 THEN 'fence_' || ${col}
    ELSE 'fence_' || pg_catalog.md5(${col} || pg_catalog.chr(10) || ${setting} || pg_catalog.chr(10)
      || ${unissued}::text) END`

/**
 * The maintenance switch, the trigger functions and `pgfence.fence_table`, which installs them on
 * a fenced table, its partitions and its inheritance children (sql/fence-triggers.sql).
 */
export const fenceTriggersSql = sqlFile('fence-triggers', {
  ...refusalLiterals,
  ...triggerNameValues,
  maintenance_role: maintenanceRole,
  marker_value: markerValueSql,
  row_function_name: rowFunctionNameSql('col', 'setting', 'unissued'),
  statement_token_prefix: quoteLiteral(statementTokenPrefix),
  epoch_tag: EPOCH_TAG,
  sequence_span: SEQUENCE_SPAN,
  current_timeline: currentTimelineSql,
})
