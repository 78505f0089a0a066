-- Demo table for docker-compose.yml; pgfence migrate adds nothing here because the fence
-- column already exists.
CREATE TABLE invoices (
  id bigint PRIMARY KEY,
  status text NOT NULL,
  amount_cents bigint,
  fencing_token bigint NOT NULL DEFAULT 0
);
INSERT INTO invoices (id, status, fencing_token) VALUES (99, 'PENDING', 100);
