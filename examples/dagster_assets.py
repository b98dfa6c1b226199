"""Dagster: a daily partitioned asset loaded into idem with `idem put`, and a
job that backfills a range with `idem backfill`.

Each materialization of a partition PUTs that day's file under a key made
from the table, the day and the file's SHA-256: a retried or re-executed
run is answered from idem's record and never loads the day twice. Dagster's
own backfills (of the asset's partitions) work the same way; the
`orders_backfill` job is the one-command alternative for a long range.

Both first declare `orders` with its key (the same declaration again
changes nothing), as examples/run_twice.sh does: a table that a first write
creates has no key, so an order that the file holds twice would be stored
twice. If an asset was materialized before the declaration and made
`orders` without a key, the declaration adopts the key when the stored rows
hold each order once; when they repeat one it is refused (409) naming the
repeats, and declaring it once with "adopt": {"repeats": "resolve"} keeps
one version of each (the latest by `updated_at`), the others in the
duplicates log: no need to drop the table.

`idem`'s exit code says whether a retry can help: 0 done, 1 refused by the
server, 2 gave up after its own retries (retry later), 3 usage error. Only
2 is left to the retry policy; a missing `idem` binary fails at once too.
idem's own lines (a refusal's bad line and column, its retries) go into the
run's log.

A late file: a partition whose file is not there yet asks Dagster to try
again in 30 minutes, up to 24 times (12 hours), then fails; materialize the
partition again once the file exists. Dagster counts those tries and the
retry policy's in one count, so a partition that waited for its file has
no retries left for an exit 2 afterwards: materialize it again. Set
IDEM_URL and IDEM_TOKEN in the environment of the code location.
"""

import json
import os
import re
import subprocess
import urllib.error
import urllib.request

from dagster import (
    AssetExecutionContext,
    Config,
    DailyPartitionsDefinition,
    Definitions,
    Failure,
    OpExecutionContext,
    RetryPolicy,
    RetryRequested,
    asset,
    job,
    op,
)

ORDERS_FILES = "/data/orders/ds={ds}.csv.gz"
ORDERS = {
    "columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
                "status": "text", "amount": "numeric", "updated_at": "timestamptz"},
    "partition_by": "ds", "primary_key": ["order_id"], "cursor": "updated_at",
}

# idem's own lines name it already (`idem: …`, `idem put: …`); the rest
# (a receipt, a backfill's table) get the prefix, so each line of the run's
# log says once where it comes from.
IDEM_LINE = re.compile(r"idem( [a-z]+)*: ")


def idem_line(line: str) -> str:
    line = line.rstrip("\n")
    return line if IDEM_LINE.match(line) else f"idem: {line}"


def run_idem(context, *args: str) -> None:
    """Runs `idem`, its output into the run's log; a refusal or a usage
    error fails without retries."""
    try:
        child = subprocess.Popen(
            ["idem", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except FileNotFoundError as e:
        raise Failure(description=f"idem is not on PATH: {e}", allow_retries=False) from None
    with child:
        for line in child.stdout:
            context.log.info(idem_line(line))
    code = child.returncode
    if code == 0:
        return
    if code == 2:
        raise RuntimeError("idem gave up after its retries; Dagster may retry")
    raise Failure(description=f"idem exited {code}: refused or wrong command", allow_retries=False)


def declare_orders(context) -> None:
    """PUT /tables/orders: the table and its key, before any load."""
    request = urllib.request.Request(
        os.environ.get("IDEM_URL", "http://127.0.0.1:8080") + "/tables/orders",
        data=json.dumps(ORDERS).encode(),
        method="PUT",
        headers={"content-type": "application/json",
                 "authorization": f"Bearer {os.environ.get('IDEM_TOKEN', '')}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            context.log.info(f"idem: orders declared ({answer.status})")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        if e.code >= 500 or e.code in (408, 429):
            raise RuntimeError(f"idem answered {e.code}: {detail}") from None
        raise Failure(description=f"idem refused the declaration ({e.code}): {detail}",
                      allow_retries=False) from None


@asset(
    partitions_def=DailyPartitionsDefinition(start_date="2026-10-01"),
    retry_policy=RetryPolicy(max_retries=3, delay=300),
)
def orders(context: AssetExecutionContext) -> None:
    ds = context.partition_key
    path = ORDERS_FILES.format(ds=ds)
    if not os.path.exists(path):
        context.log.info(f"{path} is not there yet; trying again in 30 minutes")
        raise RetryRequested(max_retries=24, seconds_to_wait=30 * 60)
    declare_orders(context)
    run_idem(context, "put", "orders", ds, path)


class BackfillRange(Config):
    from_ds: str
    to_ds: str


@op(retry_policy=RetryPolicy(max_retries=2, delay=300))
def backfill_orders(context: OpExecutionContext, config: BackfillRange) -> None:
    context.log.info(f"idem backfill orders {config.from_ds} .. {config.to_ds}")
    declare_orders(context)
    run_idem(
        context,
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
