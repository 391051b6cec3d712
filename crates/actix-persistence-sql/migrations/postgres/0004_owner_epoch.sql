-- Single writer per persistence id (fencing): the owner epoch, kept with the highest sequence
-- number. Every recovery raises it by one in the same transaction that reads the highest
-- sequence number; a write carrying an older epoch (fencing token) is refused and stores
-- nothing. 0 means nobody has taken ownership yet.
ALTER TABLE journal_highest ADD COLUMN IF NOT EXISTS owner_epoch BIGINT NOT NULL DEFAULT 0;
