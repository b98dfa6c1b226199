-- Failed console sign-ins, counted so that a guesser is slowed down: a row
-- a client address (an IPv6 client's /64), and one row '*' for all of them
-- together, each with its failures since its window started (the first
-- failure of the window). Kept in Postgres, so every idem process serving
-- the database counts against the same limit. A row whose window is over is
-- deleted by the next sign-in, so the table holds at most the addresses
-- that failed within one window.
create table idem.console_signin_failures (
    client        text primary key,
    window_start  timestamptz not null,
    failures      integer not null
);
create index console_signin_failures_window on idem.console_signin_failures (window_start);
