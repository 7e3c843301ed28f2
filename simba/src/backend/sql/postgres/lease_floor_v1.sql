CREATE OR REPLACE FUNCTION simba_lease_floor_v1() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $simba$
BEGIN
    NEW.token := GREATEST(NEW.token, COALESCE((SELECT token FROM simba_lease_floor WHERE id = 1 FOR SHARE), 0) + 1);
    RETURN NEW;
END
$simba$
