-- Tables that join a fenced table's tree later: PostgreSQL clones row triggers to new
-- partitions, but not the TRUNCATE trigger, and gives an inheritance child nothing at all.
--
-- pgfence.row_fences records what pgfence migrate fenced (and with which arguments), as
-- pgfence.resource_gates does for resource members (resource-gates.sql), and
-- pgfence.unfenced_descendants lists the members of those trees that lack one of their
-- triggers, with their nearest fenced ancestor. An event trigger at the end of every
-- CREATE TABLE and ALTER TABLE fences them; only a superuser (on RDS, rds_superuser) may create
-- one, so elsewhere migrate warns and the proxy refuses writes to them (table-name-checks.ts).
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
WITH fenced(relid, kind, triggers) AS (
  SELECT relid, 'row', {{row_fence_triggers}} FROM pgfence.row_fences
  UNION ALL
  SELECT relid, 'resource', {{resource_gate_triggers}} FROM pgfence.resource_gates
), tree AS (
  SELECT t.relid, t.root AS fenced, f.kind, f.triggers, t.depth
    FROM fenced f, LATERAL pgfence.inheritance_tree(ARRAY[f.relid]) t
), nearest AS (
  SELECT DISTINCT ON (relid, kind) * FROM tree ORDER BY relid, kind, depth
)
SELECT n.relid::regclass AS relid, n.fenced::regclass AS fenced, n.kind
  FROM nearest n
 WHERE n.depth > 0
   AND NOT n.triggers <@ ARRAY(SELECT g.tgname::text FROM pg_catalog.pg_trigger g WHERE g.tgrelid = n.relid);
GRANT SELECT ON pgfence.unfenced_descendants TO PUBLIC;

-- Fences (and gates, resource-gates.sql) the descendants that lack it in the trees of the tables
-- a DDL command created or altered (CREATE TABLE ... INHERITS / PARTITION OF, ALTER TABLE ...
-- INHERIT / ATTACH PARTITION).
CREATE OR REPLACE FUNCTION pgfence.fence_new_descendants() RETURNS event_trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  touched oid[];
  member record;
BEGIN
  -- fence_table's own ALTER TABLEs end here too: they must not start it again.
  IF pg_catalog.current_setting('pgfence.fencing_descendants', true) = 'on' THEN
    RETURN;
  END IF;
  PERFORM pg_catalog.set_config('pgfence.fencing_descendants', 'on', true);
  touched := ARRAY(
    SELECT t.relid FROM pgfence.inheritance_tree(ARRAY(
      SELECT objid FROM pg_catalog.pg_event_trigger_ddl_commands() WHERE object_type = 'table')) t);
  FOR member IN
    SELECT u.relid, u.kind, f.col, f.setting, f.required, f.unissued,
           g.resource, g.setting AS gate_setting, g.unissued AS gate_unissued
      FROM pgfence.unfenced_descendants u
      LEFT JOIN pgfence.row_fences f ON u.kind = 'row' AND f.relid = u.fenced
      LEFT JOIN pgfence.resource_gates g ON u.kind = 'resource' AND g.relid = u.fenced
     WHERE u.relid = ANY (touched)
  LOOP
    IF member.kind = 'row' THEN
      PERFORM pgfence.fence_table(member.relid, member.col, member.setting, member.required,
        member.unissued);
    ELSE
      PERFORM pgfence.gate_table(member.relid, member.resource, member.gate_setting,
        member.gate_unissued);
    END IF;
  END LOOP;
  PERFORM pg_catalog.set_config('pgfence.fencing_descendants', '', true);
END
$fn$;

DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = '{{descendants_trigger}}') THEN
    CREATE EVENT TRIGGER {{descendants_trigger}} ON ddl_command_end
      WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
      EXECUTE FUNCTION pgfence.fence_new_descendants();
    ALTER EVENT TRIGGER {{descendants_trigger}} ENABLE ALWAYS;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'pgfence: cannot create event trigger {{descendants_trigger}}: only a superuser (on Amazon RDS, rds_superuser) may'
    USING DETAIL = 'partitions and inheritance children created after pgfence migrate are not fenced until it runs again; pgfence refuses writes to them meanwhile',
      HINT = 'run pgfence migrate as a superuser once, or run it again after each CREATE TABLE ... PARTITION OF / INHERITS of a fenced table';
END
$do$;
