-- Projection fencing (the actix-persistence-projection crate): one owner per projection
-- instance key. An instance raises `owner_epoch` when it starts (taking ownership, as the
-- journal's owner epoch of a persistence id); every offset write of an instance carries its
-- epoch and is refused when the row holds a newer one, so an older instance (a deploy overlap,
-- a process thought dead) can no longer commit. Kept apart from `projection_offset`, which a
-- reset deletes.
CREATE TABLE IF NOT EXISTS projection_owner (
    projection_name TEXT   NOT NULL,
    projection_key  TEXT   NOT NULL,
    owner_epoch     BIGINT NOT NULL,
    PRIMARY KEY (projection_name, projection_key)
);
