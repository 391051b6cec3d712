-- How far delete_messages_to deleted the events of each persistence id (0: never), so that
-- recovery can tell events deleted under a snapshot that is gone (a hole) from sequence
-- numbers that no write ever stored (a rejected write).
ALTER TABLE journal_highest ADD COLUMN IF NOT EXISTS deleted_to BIGINT NOT NULL DEFAULT 0;
