CREATE TRIGGER simba_lease_floor_v1 BEFORE INSERT ON simba_lease FOR EACH ROW
SET NEW.token = GREATEST(NEW.token, COALESCE((SELECT f.token FROM simba_lease_floor f WHERE f.id = 1 LOCK IN SHARE MODE), 0))
