\set aid random(1, 100000 * :scale)
\set delta random(-5000, 5000)
SET app.fencing_token = 1;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
