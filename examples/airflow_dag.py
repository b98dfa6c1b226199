"""Airflow: each day's orders into idem with `idem put`, and a backfill task.

`load_orders` runs once per logical date and PUTs that day's file as the
day's partition. The key idem puts under comes from the table, the day and
the file's SHA-256, so an Airflow retry, a cleared task or a rerun of the
DAG run is answered from idem's record and never loads the day twice.

Before it loads, a task declares `orders` with its key (the same
declaration again changes nothing), as examples/run_twice.sh does: a table
that a first write creates has no key, so an order that the file holds
twice would be stored twice. If a load ran before the declaration (the
load task run alone, say) and made `orders` without a key, the declaration
adopts the key when the stored rows hold each order once; when they repeat
one it is refused (409) naming the repeats, and declaring it once with
"adopt": {"repeats": "resolve"} keeps one version of each (the latest by
`updated_at`), the others in the duplicates log: no need to drop the table.

`idem`'s exit code says whether a retry can help:
  0  done
  1  refused by the server (a bad row, a wrong table): retrying sends the
     same file and is refused again, so the task fails without retries
  2  gave up after its own retries (network, 5xx): Airflow may retry later
  3  usage error (a missing file, a wrong flag): fails without retries
A missing `idem` binary is a usage error too. idem's own lines (a refusal's
bad line and column, its retries) go into the task's log.

A late file: with `catchup=True` the scheduler starts a run for every day
since `start_date`, and a day whose file is not there yet would fail at
once (exit 3). So `wait_for_file` (a sensor in reschedule mode, which frees
its worker slot between checks) waits for the file, checking every 10
minutes for up to 12 hours; past that the run fails and waits for someone to
clear it once the file exists. A waiting run still counts towards
`max_active_runs` (4): while four days wait for their files, the runs of
later days queue behind them.

`backfill_orders` (triggered by hand with `from_ds` and `to_ds`) loads a
range with `idem backfill`, 4 days at a time; rerunning it loads only what
is missing. Set IDEM_URL and IDEM_TOKEN in the workers' environment (or in
an Airflow connection and pass them through `env`).
"""

import json
import logging
import os
import re
import subprocess
import urllib.error
import urllib.request
from datetime import datetime, timedelta

from airflow import DAG
from airflow.exceptions import AirflowException, AirflowFailException
from airflow.models.param import Param
from airflow.operators.python import PythonOperator
from airflow.sensors.python import PythonSensor

ORDERS_FILES = "/data/orders/ds={ds}.csv.gz"
ORDERS = {
    "columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
                "status": "text", "amount": "numeric", "updated_at": "timestamptz"},
    "partition_by": "ds", "primary_key": ["order_id"], "cursor": "updated_at",
}

# The task's own logger: what is logged here lands in the task's log, where
# a child's output written straight to the worker's console does not.
log = logging.getLogger("airflow.task")

# idem's own lines name it already (`idem: …`, `idem put: …`); the rest
# (a receipt, a backfill's table) get the prefix here, so each line of the
# task's log says once where it comes from.
IDEM_LINE = re.compile(r"idem( [a-z]+)*: ")


def idem_line(line: str) -> str:
    line = line.rstrip("\n")
    return line if IDEM_LINE.match(line) else f"idem: {line}"


def run_idem(*args: str) -> None:
    """Runs `idem`, its output into the task's log, and turns its exit code
    into Airflow's words."""
    try:
        child = subprocess.Popen(
            ["idem", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except FileNotFoundError as e:
        raise AirflowFailException(f"idem is not on the worker's PATH: {e}") from None
    with child:
        for line in child.stdout:
            log.info("%s", idem_line(line))
    code = child.returncode
    if code == 0:
        return
    if code == 2:
        raise AirflowException("idem gave up after its retries; Airflow may retry")
    raise AirflowFailException(f"idem exited {code}: refused or wrong command; not retried")


def declare_orders() -> None:
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
            log.info("idem: orders declared (%s)", answer.status)
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        if e.code >= 500 or e.code in (408, 429):
            raise AirflowException(f"idem answered {e.code}: {detail}") from None
        raise AirflowFailException(f"idem refused the declaration ({e.code}): {detail}") from None
    except OSError as e:
        raise AirflowException(f"idem could not be reached: {e}") from None


def file_arrived(ds: str) -> bool:
    return os.path.exists(ORDERS_FILES.format(ds=ds))


def load_day(ds: str) -> None:
    run_idem("put", "orders", ds, ORDERS_FILES.format(ds=ds))


def backfill(from_ds: str, to_ds: str) -> None:
    run_idem(
        "backfill", "orders",
        "--from", from_ds, "--to", to_ds,
        "--files", ORDERS_FILES,
        "--parallel", "4",
        "--quiet",
    )


with DAG(
    dag_id="orders_to_idem",
    start_date=datetime(2026, 10, 1),
    schedule="@daily",
    catchup=True,
    max_active_runs=4,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5)},
) as daily:
    declare = PythonOperator(task_id="declare_orders", python_callable=declare_orders)
    wait_for_file = PythonSensor(
        task_id="wait_for_file",
        python_callable=file_arrived,
        op_kwargs={"ds": "{{ ds }}"},
        mode="reschedule",
        poke_interval=10 * 60,
        timeout=12 * 60 * 60,
        retries=0,
    )
    load = PythonOperator(
        task_id="load_orders",
        python_callable=load_day,
        op_kwargs={"ds": "{{ ds }}"},
    )
    [declare, wait_for_file] >> load

with DAG(
    dag_id="orders_backfill",
    start_date=datetime(2026, 10, 1),
    schedule=None,
    params={
        "from_ds": Param("2026-10-01", type="string"),
        "to_ds": Param("2026-10-31", type="string"),
    },
) as by_hand:
    declare_first = PythonOperator(task_id="declare_orders", python_callable=declare_orders)
    load_range = PythonOperator(
        task_id="backfill_orders",
        python_callable=backfill,
        op_kwargs={"from_ds": "{{ params.from_ds }}", "to_ds": "{{ params.to_ds }}"},
        retries=2,
    )
    declare_first >> load_range
