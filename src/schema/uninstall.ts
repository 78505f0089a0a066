import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { fencedTables } from '../rewrite/tables.js'
import { descendantsTriggerName } from './trigger-names.js'
import { migrationLockKey } from './install.js'

/**
 * The fence columns `pgfence uninstall --drop-fence-columns` drops: those of the config's tables
 * and those pgfence.row_fences recorded (tables an earlier config fenced). A partition has its
 * parent's column, dropped with it.
 */
const dropFenceColumnsSql = (fencing: FencingConfig): string => {
  const configured = fencedTables(fencing).map(
    (table) =>
      `(${quoteLiteral(qualifiedName(table.schema, table.name))}, ${quoteLiteral(table.column)})`,
  )
  const fromConfig = configured.length
    ? `SELECT pg_catalog.to_regclass(c.rel)::oid AS relid, c.col FROM (VALUES ${configured.join(', ')}) AS c(rel, col)`
    : 'SELECT NULL::oid AS relid, NULL::text AS col WHERE false'
  return `DO $do$
DECLARE
  fence record;
BEGIN
  FOR fence IN EXECUTE
    CASE WHEN pg_catalog.to_regclass('pgfence.row_fences') IS NULL THEN ${quoteLiteral(fromConfig)}
    ELSE ${quoteLiteral(`${fromConfig} UNION SELECT relid, col FROM pgfence.row_fences`)} END
  LOOP
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = fence.relid AND NOT c.relispartition) THEN
      EXECUTE pg_catalog.format('ALTER TABLE %s DROP COLUMN IF EXISTS %I', fence.relid::regclass, fence.col);
    END IF;
  END LOOP;
END
$do$;`
}

/**
 * Everything `pgfence uninstall` runs, in one transaction, idempotently: the triggers whose
 * functions are pgfence's (fence rows, TRUNCATE refusals, resource gates; on a partitioned table
 * its partitions' clones go with it), the event trigger, the fence columns when asked, and the
 * pgfence schema with its helpers, token sequence, fences and lease table. The role
 * pgfence_maintenance is the cluster's, shared by its databases: it is left.
 */
export function uninstallSql(fencing: FencingConfig, dropFenceColumns: boolean): string {
  return [
    'BEGIN;',
    `SELECT pg_advisory_xact_lock(${migrationLockKey});`,
    `DROP EVENT TRIGGER IF EXISTS ${descendantsTriggerName};`,
    `DO $do$
DECLARE
  trigger record;
BEGIN
  FOR trigger IN
    SELECT t.tgname, t.tgrelid::regclass AS rel
      FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
     WHERE p.pronamespace = pg_catalog.to_regnamespace('pgfence') AND t.tgparentid = 0
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS %I ON %s', trigger.tgname, trigger.rel);
  END LOOP;
END
$do$;`,
    ...(dropFenceColumns ? [dropFenceColumnsSql(fencing)] : []),
    'DROP SCHEMA IF EXISTS pgfence CASCADE;',
    'COMMIT;',
    '',
  ].join('\n')
}
