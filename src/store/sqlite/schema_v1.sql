CREATE TABLE locks (
    resource    TEXT    NOT NULL PRIMARY KEY,   -- UNIQUE(resource): one row per resource
    owner       TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,               -- ms since the Unix epoch
    expires_at  INTEGER NOT NULL                -- live while now < expires_at
) WITHOUT ROWID;

CREATE TABLE fence_counter (
    id   INTEGER PRIMARY KEY CHECK (id = 0),
    last INTEGER NOT NULL
);
INSERT INTO fence_counter (id, last) VALUES (0, 0);

CREATE TABLE history (
    id             INTEGER PRIMARY KEY,         -- commit order
    at             INTEGER NOT NULL,
    resource       TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    fence          INTEGER NOT NULL,
    event          TEXT    NOT NULL,
    previous_owner TEXT
);
CREATE INDEX history_by_resource ON history (resource, id);
