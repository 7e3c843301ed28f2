-- Replaced as a whole: `CREATE OR REPLACE TRIGGER` needs PostgreSQL 14.
DROP TRIGGER IF EXISTS simba_lease_floor_v1 ON simba_lease;

CREATE TRIGGER simba_lease_floor_v1 BEFORE INSERT ON simba_lease
FOR EACH ROW EXECUTE FUNCTION simba_lease_floor_v1();
