-- The web console's sessions: one a sign-in, until its sign-out or expiry.
-- The cookie holds a random secret; only its SHA-256 is kept, beside the
-- SHA-256 of the token signed in with (as idem.tokens keeps it), so each
-- request sees exactly what that token may see now (a revoked token's
-- sessions are refused with it). Kept in Postgres, so any idem process
-- serving the database knows every session.
create table idem.console_sessions (
    session_sha256  bytea primary key,
    token_sha256    bytea not null,
    -- The secret every form of the session posts back (CSRF).
    csrf            text not null,
    created_at      timestamptz not null default now(),
    expires_at      timestamptz not null
);
create index console_sessions_expiry on idem.console_sessions (expires_at);

-- The console's pages read these: a table's newest loads, and its pending
-- rejects of one error column (the first error's; '' for a row's own
-- error), page by page.
create index loads_by_table_newest on idem.loads (table_name, load_id desc);
create index rejects_by_error on idem.rejects
    (table_name, status, (coalesce(errors -> 0 ->> 'column', '')), load_id, record);
