-- The postgres lease store's table (src/lease/postgres-lease-store.ts): one row per resource
-- ever leased, live while expires_at is ahead of PostgreSQL's clock. A release ends the row's
-- lease instead of deleting the row, so every later grant of the resource goes through the
-- locked ON CONFLICT path and draws its token only after the previous grant committed.
CREATE TABLE IF NOT EXISTS pgfence.leases (
  resource text PRIMARY KEY,
  owner text NOT NULL,
  token bigint NOT NULL,
  granted_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
