import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { fencedTables } from '../rewrite/tables.js'
import { descendantsTriggerName } from './trigger-names.js'
import { migrationLockKey } from './install.js'
import { sqlFile } from './sql-file.js'

/** `--drop-fence-columns` (sql/drop-fence-columns.sql), with the config's fenced tables. */
const dropFenceColumnsSql = (fencing: FencingConfig): string => {
  const configured = fencedTables(fencing).map((table) => [
    qualifiedName(table.schema, table.name),
    table.column,
  ])
  return sqlFile('drop-fence-columns', {
    configured_fence_columns: `${quoteLiteral(JSON.stringify(configured))}::jsonb`,
  })
}

/**
 * Everything `pgfence uninstall` runs, in one transaction, idempotently: the event trigger, the
 * triggers whose functions are pgfence's (sql/uninstall.sql: refused, with nothing removed, when
 * objects of the database's own depend on the schema), the fence columns when asked, and the pgfence
 * schema with its helpers, token sequence, fences and lease table. The role
 * pgfence_maintenance is the cluster's, shared by its databases: it is left.
 */
export function uninstallSql(fencing: FencingConfig, dropFenceColumns: boolean): string {
  return [
    'BEGIN;',
    `SELECT pg_advisory_xact_lock(${migrationLockKey});`,
    `DROP EVENT TRIGGER IF EXISTS ${descendantsTriggerName};`,
    sqlFile('uninstall'),
    ...(dropFenceColumns ? [dropFenceColumnsSql(fencing)] : []),
    'DROP SCHEMA IF EXISTS pgfence CASCADE;',
    'COMMIT;',
    '',
  ].join('\n')
}
