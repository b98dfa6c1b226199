"""Airflow: each day's orders into idem with `idem put`, and a backfill task.

`load_orders` runs once per logical date and PUTs that day's file as the
day's partition. The key idem puts under comes from the table, the day and
the file's SHA-256, so an Airflow retry, a cleared task or a rerun of the
DAG run is answered from idem's record and never loads the day twice.

`idem`'s exit code says whether a retry can help:
  0  done
  1  refused by the server (a bad row, a wrong table): retrying sends the
     same file and is refused again, so the task fails without retries
  2  gave up after its own retries (network, 5xx): Airflow may retry later
  3  usage error (a missing file, a wrong flag): fails without retries

`backfill_orders` (triggered by hand with `from_ds` and `to_ds`) loads a
range with `idem backfill`, 4 days at a time; rerunning it loads only what
is missing. Set IDEM_URL and IDEM_TOKEN in the workers' environment (or in
an Airflow connection and pass them through `env`).
"""

import subprocess
from datetime import datetime, timedelta

from airflow import DAG
from airflow.exceptions import AirflowException, AirflowFailException
from airflow.models.param import Param
from airflow.operators.python import PythonOperator

ORDERS_FILES = "/data/orders/ds={ds}.csv.gz"


def run_idem(*args: str) -> None:
    """Runs `idem` and turns its exit code into Airflow's words."""
    code = subprocess.run(["idem", *args], check=False).returncode
    if code == 0:
        return
    if code == 2:
        raise AirflowException("idem gave up after its retries; Airflow may retry")
    raise AirflowFailException(f"idem exited {code}: refused or wrong command; not retried")


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
    PythonOperator(
        task_id="load_orders",
        python_callable=load_day,
        op_kwargs={"ds": "{{ ds }}"},
    )

with DAG(
    dag_id="orders_backfill",
    start_date=datetime(2026, 10, 1),
    schedule=None,
    params={
        "from_ds": Param("2026-10-01", type="string"),
        "to_ds": Param("2026-10-31", type="string"),
    },
) as by_hand:
    PythonOperator(
        task_id="backfill_orders",
        python_callable=backfill,
        op_kwargs={"from_ds": "{{ params.from_ds }}", "to_ds": "{{ params.to_ds }}"},
        retries=2,
    )
