"""Dagster: a daily partitioned asset loaded into idem with `idem put`, and a
job that backfills a range with `idem backfill`.

Each materialization of a partition PUTs that day's file under a key made
from the table, the day and the file's SHA-256: a retried or re-executed
run is answered from idem's record and never loads the day twice. Dagster's
own backfills (of the asset's partitions) work the same way; the
`orders_backfill` job is the one-command alternative for a long range.

`idem`'s exit code says whether a retry can help: 0 done, 1 refused by the
server, 2 gave up after its own retries (retry later), 3 usage error. Only
2 is left to the retry policy. Set IDEM_URL and IDEM_TOKEN in the
environment of the code location.
"""

import subprocess

from dagster import (
    AssetExecutionContext,
    Config,
    DailyPartitionsDefinition,
    Definitions,
    Failure,
    OpExecutionContext,
    RetryPolicy,
    asset,
    job,
    op,
)

ORDERS_FILES = "/data/orders/ds={ds}.csv.gz"


def run_idem(*args: str) -> None:
    """Runs `idem`; a refusal or a usage error fails without retries."""
    code = subprocess.run(["idem", *args], check=False).returncode
    if code == 0:
        return
    if code == 2:
        raise RuntimeError("idem gave up after its retries; Dagster may retry")
    raise Failure(description=f"idem exited {code}: refused or wrong command", allow_retries=False)


@asset(
    partitions_def=DailyPartitionsDefinition(start_date="2026-10-01"),
    retry_policy=RetryPolicy(max_retries=3, delay=300),
)
def orders(context: AssetExecutionContext) -> None:
    ds = context.partition_key
    run_idem("put", "orders", ds, ORDERS_FILES.format(ds=ds))


class BackfillRange(Config):
    from_ds: str
    to_ds: str


@op(retry_policy=RetryPolicy(max_retries=2, delay=300))
def backfill_orders(context: OpExecutionContext, config: BackfillRange) -> None:
    context.log.info(f"idem backfill orders {config.from_ds} .. {config.to_ds}")
    run_idem(
        "backfill", "orders",
        "--from", config.from_ds, "--to", config.to_ds,
        "--files", ORDERS_FILES,
        "--parallel", "4",
        "--quiet",
    )


@job
def orders_backfill():
    backfill_orders()


defs = Definitions(assets=[orders], jobs=[orders_backfill])
