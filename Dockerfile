# syntax=docker/dockerfile:1
#
# idem's image: `docker build -t idem .`, then configure it with environment
# variables only (DATABASE_URL, IDEM_ADMIN_TOKEN, IDEM_*; see
# docs/operations/docker.md). Needs BuildKit (the default builder of Docker 23
# and later) for the cache mounts. In a container `localhost` is the
# container: a Postgres on the host is host.docker.internal in DATABASE_URL
# (on Linux with --add-host=host.docker.internal:host-gateway), one in a
# compose network its service's name.

# Build stage: the same command as on a developer's machine. The crates
# downloaded and the target folder live in BuildKit caches, so a rebuild
# after a change to idem's code compiles idem alone. The migrations and
# openapi.yaml are compiled into the binary (sqlx::migrate!, include_str!);
# no query is checked against a database at build time.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# The image's binary without debug info and symbols: Cargo.toml keeps line
# tables in release builds for profiling on a developer's machine (debug = 1),
# which made the image's binary 99 MB.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
    && cp target/release/idem /usr/local/bin/idem

# Run stage: the binary alone on the Debian it was built on (same glibc),
# as a user without privileges.
FROM debian:bookworm-slim

# ca-certificates: a private CA's certificate can be added beside them and
# named with sslrootcert=… in DATABASE_URL (public CAs are built into idem).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A fixed uid and gid, so a volume's owner can be set from the host. The
# spool folder holds the body of a re-sent partition while its hash is
# checked (up to IDEM_MAX_PUT_BODY_BYTES): mount a volume on it.
RUN groupadd --gid 10001 idem \
    && useradd --uid 10001 --gid idem --home-dir /var/lib/idem --no-create-home \
       --shell /usr/sbin/nologin idem \
    && mkdir -p /var/lib/idem/spool \
    && chown -R idem:idem /var/lib/idem \
    && chmod 0700 /var/lib/idem/spool

COPY --from=build /usr/local/bin/idem /usr/local/bin/idem

# idem's default address, 127.0.0.1:8080, cannot be reached from outside a
# container.
ENV IDEM_LISTEN=0.0.0.0:8080 \
    IDEM_SPOOL_DIR=/var/lib/idem/spool

USER 10001:10001
WORKDIR /var/lib/idem
EXPOSE 8080

# Liveness: GET /healthz on the port IDEM_LISTEN names, with bash's own
# /dev/tcp (the image has no curl). It answers 200 while the process serves,
# whether or not the database does; GET /readyz is the readiness check.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/bin/bash", "-c", "exec 3<>\"/dev/tcp/127.0.0.1/${IDEM_LISTEN##*:}\" && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r -t 4 _ status _ <&3 && [ \"$status\" = 200 ]"]

# `idem serve` migrates, then serves until SIGTERM, letting requests in
# flight finish for IDEM_SHUTDOWN_GRACE_SECS (30 s): stop the container with
# a longer timeout than that (`docker stop -t 40`, compose's
# stop_grace_period).
ENTRYPOINT ["idem"]
CMD ["serve"]
