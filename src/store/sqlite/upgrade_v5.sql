ALTER TABLE history ADD COLUMN by_token TEXT;   -- the operator's server token that broke it
