-- Resource fences: one fence per resource name, raised by every write to a member table (through
-- pgfence.enter_resource) and by pgfence.raise_fence. Raising takes the fence row's lock and
-- keeps it until the transaction ends, so a new holder's raise waits for an old holder's
-- in-flight transaction, and every later write of the old holder is refused: the committed
-- history of a resource is in token order.
--
-- Applications get no privileges on the fence table: the only way to move a fence is through
-- pgfence.lock_fence (SECURITY DEFINER), which only ever raises it.
CREATE TABLE IF NOT EXISTS pgfence.resource_fences (
  resource text PRIMARY KEY,
  token bigint NOT NULL
);
REVOKE ALL ON pgfence.resource_fences FROM PUBLIC;
GRANT SELECT ON pgfence.resource_fences TO PUBLIC;

-- Always empty: the target of the data-modifying CTE that gates INSERT shapes with no WHERE.
CREATE TABLE IF NOT EXISTS pgfence.gate_anchor ();
GRANT SELECT, DELETE ON pgfence.gate_anchor TO PUBLIC;

-- Raises the fence of res to incoming if it is lower, locks the fence row until the transaction
-- ends, and returns the fence's token: higher than incoming when the caller is stale.
CREATE OR REPLACE FUNCTION pgfence.lock_fence(res text, incoming bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  committed bigint;
BEGIN
  -- ON CONFLICT DO UPDATE locks the row even when its WHERE is false (equal or higher token).
  INSERT INTO pgfence.resource_fences AS f (resource, token) VALUES (res, incoming)
  ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token < excluded.token;
  SELECT f.token INTO committed FROM pgfence.resource_fences AS f WHERE f.resource = res;
  RETURN committed;
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.resource_name(
  comment_resource text, setting text, rel text
) RETURNS text LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  raw text := coalesce(comment_resource, pg_catalog.current_setting(setting, true));
BEGIN
  IF coalesce(raw, '') = '' THEN
    PERFORM pgfence.refuse('PF428', {{resource_required_message}},
      'no fencing resource was presented for a write to table ' || pgfence.relation_name(rel),
      'SET ' || setting || ' to the resource of the lock you hold, or pass it in a SQL comment',
      rel, NULL);
  END IF;
  RETURN raw;
END
$fn$;

-- The gate of a write to a member table: PF409 if the resource's fence is higher than incoming,
-- otherwise the fence is raised to incoming and stays locked until the transaction ends. What
-- it entered is recorded for the rest of the transaction, tagged with its id.
CREATE OR REPLACE FUNCTION pgfence.raise_resource(res text, incoming bigint, rel text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  committed bigint := pgfence.lock_fence(res, incoming);
BEGIN
  IF committed > incoming THEN
    PERFORM pgfence.refuse('PF409', {{stale_token_message}},
      pg_catalog.format({{stale_token_detail}}, incoming, committed, 'resource '
        || pg_catalog.quote_literal(res)
        || coalesce(' (write to table ' || pgfence.relation_name(rel) || ')', '')),
      {{stale_fence_hint}}, rel, NULL);
  END IF;
  IF incoming IS NOT NULL THEN
    PERFORM pg_catalog.set_config({{entered_setting}},
      pg_catalog.pg_current_xact_id()::text || ' ' || incoming || ' ' || res, true);
  END IF;
  RETURN true;
END
$fn$;

-- The proxy's gate: raise_resource, unless this transaction entered the resource with the same
-- token already (the member table's own gate trigger, resource-gates.sql, runs first): its lock
-- is held from then on.
CREATE OR REPLACE FUNCTION pgfence.enter_resource(res text, incoming bigint, rel text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF pg_catalog.current_setting({{entered_setting}}, true)
       = pg_catalog.pg_current_xact_id_if_assigned()::text || ' ' || incoming || ' ' || res THEN
    RETURN true;
  END IF;
  RETURN pgfence.raise_resource(res, incoming, rel);
END
$fn$;

-- A new holder's first act: raises the resource's fence to its token (PF409 if already higher).
CREATE OR REPLACE FUNCTION pgfence.raise_fence(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF coalesce(resource, '') = '' THEN
    PERFORM pgfence.refuse('PF428', {{resource_required_message}},
      'pgfence.raise_fence was called without a resource name', 'pass the resource of your lock',
      NULL, NULL);
  END IF;
  IF token IS NULL THEN
    PERFORM pgfence.refuse('PF428', {{token_required_message}},
      'pgfence.raise_fence was called without a token', 'pass the token of your lock',
      NULL, NULL);
  END IF;
  IF token < 0 THEN
    PERFORM pgfence.refuse('PF400', {{invalid_token_message}},
      pg_catalog.format({{invalid_token_detail}}, token), {{invalid_token_hint}}, NULL, NULL);
  END IF;
  PERFORM pgfence.enter_resource(resource, token, NULL);
  RETURN token;
END
$fn$;
