-- Bearer tokens. Only the SHA-256 of a secret is kept; a secret is shown
-- once, when its token is made. Revocation is a timestamp, read by every
-- idem process on every request, so it takes effect at once everywhere.
create table idem.tokens (
    id             uuid primary key,
    name           text not null,
    secret_sha256  bytea not null unique check (length(secret_sha256) = 32),
    scopes         text[] not null,
    tables         text[] not null,
    created_at     timestamptz not null default now(),
    expires_at     timestamptz,
    revoked_at     timestamptz
);

-- Which token made each load (null for the bootstrap admin token and in
-- open mode, which have no row in idem.tokens).
alter table idem.loads add column token_id uuid, add column token_name text;
