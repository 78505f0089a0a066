/** The event trigger that fences tables joining a fenced table's tree after `pgfence migrate`. */
export const descendantsTriggerName = 'pgfence_fence_descendants'

/**
 * Tables that join a fenced table's tree later: PostgreSQL clones row triggers to new
 * partitions, but not the TRUNCATE trigger, and gives an inheritance child nothing at all.
 *
 * `pgfence.row_fences` records what `pgfence migrate` fenced (and with which arguments), and
 * `pgfence.unfenced_descendants` lists the members of those trees that lack a fence trigger,
 * with the arguments of their nearest fenced ancestor. An event trigger at the end of every
 * CREATE TABLE and ALTER TABLE fences them; only a superuser (on RDS, rds_superuser) may create
 * one, so elsewhere migrate warns and the proxy refuses writes to them (table-name-checks.ts).
 */
export const fenceDescendantsSql = `
CREATE TABLE IF NOT EXISTS pgfence.row_fences (
  relid oid PRIMARY KEY,
  col text NOT NULL,
  setting text NOT NULL,
  required boolean NOT NULL,
  unissued boolean NOT NULL
);
REVOKE ALL ON pgfence.row_fences FROM PUBLIC;
GRANT SELECT ON pgfence.row_fences TO PUBLIC;

-- Records a fenced table (fence_table's arguments), forgetting tables dropped since.
CREATE OR REPLACE FUNCTION pgfence.record_row_fence(
  rel regclass, col text, setting text, required boolean, unissued boolean
) RETURNS void LANGUAGE sql AS $fn$
  DELETE FROM pgfence.row_fences f
   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = f.relid);
  INSERT INTO pgfence.row_fences VALUES (rel, col, setting, required, unissued)
  ON CONFLICT (relid) DO UPDATE SET col = excluded.col, setting = excluded.setting,
    required = excluded.required, unissued = excluded.unissued;
$fn$;

CREATE OR REPLACE VIEW pgfence.unfenced_descendants AS
WITH RECURSIVE tree(relid, fenced, depth) AS (
  SELECT f.relid, f.relid, 0 FROM pgfence.row_fences f
  UNION ALL
  SELECT i.inhrelid, t.fenced, t.depth + 1
    FROM pg_catalog.pg_inherits i JOIN tree t ON i.inhparent = t.relid
), nearest AS (
  SELECT DISTINCT ON (relid) relid, fenced, depth FROM tree ORDER BY relid, depth
)
SELECT n.relid::regclass AS relid, n.fenced::regclass AS fenced,
       f.col, f.setting, f.required, f.unissued
  FROM nearest n JOIN pgfence.row_fences f ON f.relid = n.fenced
 WHERE n.depth > 0
   AND (NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                     WHERE t.tgrelid = n.relid AND t.tgname = 'pgfence_fence_truncate')
     OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                     WHERE t.tgrelid = n.relid AND t.tgname = 'pgfence_fence_update'));
GRANT SELECT ON pgfence.unfenced_descendants TO PUBLIC;

-- Fences the unfenced descendants in the trees of the tables a DDL command created or altered
-- (CREATE TABLE ... INHERITS / PARTITION OF, ALTER TABLE ... INHERIT / ATTACH PARTITION).
CREATE OR REPLACE FUNCTION pgfence.fence_new_descendants() RETURNS event_trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  member record;
BEGIN
  -- fence_table's own ALTER TABLEs end here too: they must not start it again.
  IF pg_catalog.current_setting('pgfence.fencing_descendants', true) = 'on' THEN
    RETURN;
  END IF;
  PERFORM pg_catalog.set_config('pgfence.fencing_descendants', 'on', true);
  FOR member IN
    WITH RECURSIVE tree(relid) AS (
      SELECT objid FROM pg_catalog.pg_event_trigger_ddl_commands() WHERE object_type = 'table'
      UNION
      SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.relid
    )
    SELECT u.* FROM pgfence.unfenced_descendants u JOIN tree ON tree.relid = u.relid
  LOOP
    PERFORM pgfence.fence_table(member.relid, member.col, member.setting, member.required,
      member.unissued);
  END LOOP;
  PERFORM pg_catalog.set_config('pgfence.fencing_descendants', '', true);
END
$fn$;

DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = '${descendantsTriggerName}') THEN
    CREATE EVENT TRIGGER ${descendantsTriggerName} ON ddl_command_end
      WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
      EXECUTE FUNCTION pgfence.fence_new_descendants();
    ALTER EVENT TRIGGER ${descendantsTriggerName} ENABLE ALWAYS;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'pgfence: cannot create event trigger ${descendantsTriggerName}: only a superuser (on Amazon RDS, rds_superuser) may'
    USING DETAIL = 'partitions and inheritance children created after pgfence migrate are not fenced until it runs again; pgfence refuses writes to them meanwhile',
      HINT = 'run pgfence migrate as a superuser once, or run it again after each CREATE TABLE ... PARTITION OF / INHERITS of a fenced table';
END
$do$;
`

/** Records one fenced table for the event trigger; the arguments are those of fence_table. */
export const recordRowFenceSql = (args: (string | boolean)[]): string =>
  `SELECT pgfence.record_row_fence(${args.join(', ')});`
