ALTER TABLE locks ADD COLUMN token TEXT NOT NULL DEFAULT '';   -- the server token that took it
ALTER TABLE history ADD COLUMN token TEXT NOT NULL DEFAULT '';
CREATE TABLE waiters_v4 (
    ticket     INTEGER PRIMARY KEY AUTOINCREMENT, -- arrival order, never reused
    resource   TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    token      TEXT    NOT NULL DEFAULT '',     -- '': no token
    expires_at INTEGER NOT NULL,                -- a live place while now < expires_at
    UNIQUE (resource, owner, token)
);
INSERT INTO waiters_v4 (ticket, resource, owner, expires_at)
    SELECT ticket, resource, owner, expires_at FROM waiters;
DROP TABLE waiters;
ALTER TABLE waiters_v4 RENAME TO waiters;
