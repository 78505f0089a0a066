-- The resource fence on every write path: a statement-level BEFORE INSERT/UPDATE/DELETE/TRUNCATE
-- trigger on each member table of a fixed resource (and on its partitions and inheritance
-- children: statement triggers are not cloned) enters the resource through
-- pgfence.raise_resource, as the proxy's rewrite does (resource-fences.sql): same SQLSTATEs, and
-- the fence row stays locked until the transaction ends. The token is read as the row triggers
-- read theirs (the proxy's statement marker, else the session setting).
--
-- raise_resource records what it entered in a transaction-local setting, tagged with the
-- transaction's id so that a value set by hand or left from another transaction never matches;
-- the trigger's WHEN (built-ins only) compares it, so a statement the proxy gated, and every
-- later statement of the transaction with the same resource and token, pays nothing more.
--
-- resourceFrom: session rules are gated by the proxy only: a resource named in a statement's
-- comment cannot reach a trigger yet (see the README, "Limits").
CREATE TABLE IF NOT EXISTS pgfence.resource_gates (
  relid oid PRIMARY KEY,
  resource text NOT NULL,
  setting text NOT NULL,
  unissued boolean NOT NULL
);
REVOKE ALL ON pgfence.resource_gates FROM PUBLIC;
GRANT SELECT ON pgfence.resource_gates TO PUBLIC;

-- Arguments: resource, token setting, rejectUnissuedTokens.
CREATE OR REPLACE FUNCTION pgfence.gate_statement() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  setting text := TG_ARGV[1];
  rel text := pg_catalog.quote_ident(TG_TABLE_SCHEMA) || '.' || pg_catalog.quote_ident(TG_TABLE_NAME);
  presented text := {{effective_token}};
  -- The marker's token, when it is not simply the session's.
  marker text := CASE WHEN presented IS DISTINCT FROM pg_catalog.current_setting(setting, true)
    THEN presented END;
  token bigint;
BEGIN
  IF pgfence.maintenance() THEN
    RETURN NULL;
  END IF;
  token := CASE WHEN TG_ARGV[2]::boolean
    THEN pgfence.issued_token(marker, setting, true, rel, NULL)
    ELSE pgfence.parse_token(marker, setting, true, rel, NULL) END;
  PERFORM pgfence.raise_resource(TG_ARGV[0], token, rel);
  RETURN NULL;
END
$fn$;

-- Gates a member table and every table in its tree, and records it for the event trigger.
CREATE OR REPLACE FUNCTION pgfence.gate_table(
  rel regclass, res text, setting text, unissued boolean
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  member regclass;
  entered text := pg_catalog.format(
    $t$NOT coalesce(pg_catalog.current_setting({{entered_setting}}, true) = pg_catalog.pg_current_xact_id_if_assigned()::text || ' ' || {{effective_token_format}} || ' ' || %L, false)$t$,
    setting, res);
BEGIN
  FOR member IN SELECT relid::regclass FROM pgfence.inheritance_tree(ARRAY[rel::oid]) LOOP
    PERFORM pgfence.create_trigger(member, {{resource_gate_trigger}}, 'BEFORE INSERT OR UPDATE OR DELETE',
      pg_catalog.format('FOR EACH STATEMENT WHEN (%s) EXECUTE FUNCTION pgfence.gate_statement(%L, %L, %L)',
        entered, res, setting, unissued));
    PERFORM pgfence.create_trigger(member, {{resource_gate_truncate_trigger}}, 'BEFORE TRUNCATE',
      pg_catalog.format('FOR EACH STATEMENT WHEN (%s) EXECUTE FUNCTION pgfence.gate_statement(%L, %L, %L)',
        entered, res, setting, unissued));
  END LOOP;
  DELETE FROM pgfence.resource_gates g
   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = g.relid);
  INSERT INTO pgfence.resource_gates VALUES (rel, res, setting, unissued)
  ON CONFLICT (relid) DO UPDATE SET resource = excluded.resource, setting = excluded.setting,
    unissued = excluded.unissued;
END
$fn$;
