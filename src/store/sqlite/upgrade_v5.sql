ALTER TABLE history ADD COLUMN by_token TEXT;   -- the operator's server token that broke it
ALTER TABLE history ADD COLUMN expires_at INTEGER; -- the end of the lease the event left
ALTER TABLE waiters ADD COLUMN since INTEGER;      -- when the place was taken (ms)
ALTER TABLE waiters ADD COLUMN mode TEXT NOT NULL DEFAULT 'exclusive'; -- what it waits for
ALTER TABLE waiters ADD COLUMN lim INTEGER;
ALTER TABLE waiters ADD COLUMN members TEXT;       -- a set's members, a JSON array; NULL: one
