ALTER TABLE locks ADD COLUMN guarded INTEGER NOT NULL DEFAULT 0; -- 1: taken by run
