-- A console session's CSRF secret is now derived from the session's own
-- secret (HMAC-SHA-256, see src/http/console/session.rs), which only the
-- cookie holds: the store keeps nothing of it, as it keeps only digests of
-- the session's and the token's secrets. Sessions signed in before go on;
-- a form on a page they loaded before carries the old secret and is
-- refused once (reloading the page gives the new one).
alter table idem.console_sessions drop column csrf;
