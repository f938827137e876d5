CREATE TABLE resources (
    resource TEXT NOT NULL PRIMARY KEY          -- UNIQUE(resource)
) WITHOUT ROWID;
INSERT INTO resources (resource) SELECT DISTINCT resource FROM locks;
CREATE TABLE locks_v2 (
    resource    TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,               -- ms since the Unix epoch
    expires_at  INTEGER NOT NULL,               -- live while now < expires_at
    mode        TEXT    NOT NULL DEFAULT 'exclusive', -- exclusive | shared | semaphore
    lim         INTEGER,                        -- a semaphore's N
    note        TEXT,
    PRIMARY KEY (resource, fence),
    UNIQUE (resource, owner)                    -- one tenure per owner and resource
) WITHOUT ROWID;
INSERT INTO locks_v2 (resource, owner, fence, acquired_at, expires_at)
    SELECT resource, owner, fence, acquired_at, expires_at FROM locks;
DROP TABLE locks;
ALTER TABLE locks_v2 RENAME TO locks;
ALTER TABLE history ADD COLUMN mode TEXT NOT NULL DEFAULT 'exclusive';
ALTER TABLE history ADD COLUMN lim INTEGER;
ALTER TABLE history ADD COLUMN note TEXT;
ALTER TABLE history ADD COLUMN operator TEXT;   -- who broke the lock
ALTER TABLE history ADD COLUMN reason TEXT;     -- why
CREATE TABLE waiters (
    ticket     INTEGER PRIMARY KEY AUTOINCREMENT, -- arrival order, never reused
    resource   TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,                -- a live place while now < expires_at
    UNIQUE (resource, owner)
);
