"""The orchestrator examples' helpers, run without Airflow or Dagster: small
stand-ins for the names the examples import, then each helper against a
fake `idem` (what reaches the task's log, what a missing binary raises) and
against the real server (the table declared with its key, a file holding an
order twice loaded as one row, a late file).

Run by tests/api/examples.rs with IDEM_URL, IDEM_TOKEN, IDEM_BIN (the real
binary) and EXAMPLES (the examples' folder) set. Prints one line a check.
"""

import gzip
import importlib.util
import json
import logging
import os
import sys
import tempfile
import types
import urllib.request


def stub(name, **names):
    module = types.ModuleType(name)
    module.__dict__.update(names)
    sys.modules[name] = module


class Anything:
    """An operator, a DAG, a policy…: takes any arguments, chains with >>."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __rshift__(self, other):
        return other

    def __rrshift__(self, other):
        return self


class AirflowException(Exception):
    pass


class AirflowFailException(AirflowException):
    pass


class Failure(Exception):
    def __init__(self, description=None, allow_retries=True):
        super().__init__(description)
        self.allow_retries = allow_retries


class RetryRequested(Exception):
    def __init__(self, max_retries=1, seconds_to_wait=0):
        super().__init__(max_retries, seconds_to_wait)


def decorator(*args, **kwargs):
    if args and callable(args[0]):
        return args[0]
    return lambda fn: fn


stub("airflow", DAG=Anything)
stub("airflow.exceptions", AirflowException=AirflowException,
     AirflowFailException=AirflowFailException)
stub("airflow.models")
stub("airflow.models.param", Param=Anything)
stub("airflow.operators")
stub("airflow.operators.python", PythonOperator=Anything)
stub("airflow.sensors")
stub("airflow.sensors.python", PythonSensor=Anything)
stub("dagster", AssetExecutionContext=object, Config=object,
     DailyPartitionsDefinition=Anything, Definitions=Anything, Failure=Failure,
     OpExecutionContext=object, RetryPolicy=Anything, RetryRequested=RetryRequested,
     asset=decorator, job=decorator, op=decorator)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.environ["EXAMPLES"], name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


airflow_dag = load("airflow_dag")
dagster_assets = load("dagster_assets")


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


task_log = Lines()
logging.getLogger("airflow.task").addHandler(task_log)
logging.getLogger("airflow.task").setLevel(logging.INFO)


class Context:
    """A Dagster context: a partition key and a log."""

    def __init__(self, partition_key=None):
        self.partition_key = partition_key
        self.lines = []
        self.log = types.SimpleNamespace(info=self.lines.append)


def raises(kind, call, *args):
    try:
        call(*args)
    except kind as e:
        return e
    raise AssertionError(f"{call.__name__}{args} did not raise {kind.__name__}")


def check(what, ok):
    assert ok, what
    print(f"orchestrators: {what}")


work = tempfile.mkdtemp()
fake_bin = os.path.join(work, "fake-bin")
real_bin = os.path.join(work, "real-bin")
empty_bin = os.path.join(work, "empty-bin")
for folder in (fake_bin, real_bin, empty_bin):
    os.mkdir(folder)
with open(os.path.join(fake_bin, "idem"), "w") as fake:
    fake.write("#!/bin/sh\necho '{\"rows_written\":0}'\n"
               "echo 'idem: orders 2026-10-12: refused, HTTP 422 Bad rows' >&2\n"
               "echo '  line 2, column amount: expected numeric' >&2\n"
               "exit \"$FAKE_IDEM_EXIT\"\n")
os.chmod(os.path.join(fake_bin, "idem"), 0o755)
os.symlink(os.environ["IDEM_BIN"], os.path.join(real_bin, "idem"))
system_path = os.environ["PATH"]

# idem's output reaches the task's log; its exit code decides the retries.
os.environ["PATH"] = fake_bin + os.pathsep + system_path
os.environ["FAKE_IDEM_EXIT"] = "1"
refused = raises(AirflowFailException, airflow_dag.run_idem, "put", "orders")
check("airflow: a refusal fails without retries, its lines in the task's log, each named once",
      task_log.lines[-3:] == ['idem: {"rows_written":0}',
                              "idem: orders 2026-10-12: refused, HTTP 422 Bad rows",
                              "idem:   line 2, column amount: expected numeric"]
      and "exited 1" in str(refused))
os.environ["FAKE_IDEM_EXIT"] = "2"
gave_up = raises(AirflowException, airflow_dag.run_idem, "put", "orders")
check("airflow: giving up is left to Airflow's retries", not isinstance(gave_up, AirflowFailException))
context = Context()
os.environ["FAKE_IDEM_EXIT"] = "1"
failure = raises(Failure, dagster_assets.run_idem, context, "put", "orders")
check("dagster: a refusal fails without retries, its lines in the run's log, each named once",
      not failure.allow_retries
      and context.lines[-2:] == ["idem: orders 2026-10-12: refused, HTTP 422 Bad rows",
                                 "idem:   line 2, column amount: expected numeric"])

# A missing binary is a usage error: no retries.
os.environ["PATH"] = empty_bin
missing = raises(AirflowFailException, airflow_dag.run_idem, "put", "orders")
check("airflow: a missing idem fails at once", "not on the worker's PATH" in str(missing))
failure = raises(Failure, dagster_assets.run_idem, Context(), "put", "orders")
check("dagster: a missing idem fails at once", not failure.allow_retries)

# Against the real server: declared with its key, a repeated order is one row.
os.environ["PATH"] = real_bin + os.pathsep + system_path
files = os.path.join(work, "ds={ds}.csv.gz")
airflow_dag.ORDERS_FILES = dagster_assets.ORDERS_FILES = files
with gzip.open(files.format(ds="2026-10-12"), "wt") as day:
    day.write("order_id,status,amount\n1,paid,10.50\n2,paid,99.00\n2,paid,99.00\n")
check("airflow: no file yet for a day, the sensor waits", not airflow_dag.file_arrived("2026-10-13"))
airflow_dag.declare_orders()
before = len(task_log.lines)
airflow_dag.load_day("2026-10-12")
loaded = task_log.lines[before:]
check("airflow: the real idem's receipt in the task's log, no line named twice",
      any(line.startswith('idem: {"changed":true') for line in loaded)
      and not any(line.startswith("idem: idem") for line in loaded))


def get(path):
    request = urllib.request.Request(os.environ["IDEM_URL"] + path,
                                     headers={"authorization": "Bearer " + os.environ["IDEM_TOKEN"]})
    with urllib.request.urlopen(request) as answer:
        return answer.read().decode()


table = json.loads(get("/tables/orders"))
rows = get("/partitions/orders/2026-10-12").splitlines()
check("airflow: orders declared with its key, the repeated order stored once",
      table["primary_key"] == ["order_id"] and len(rows) == 2)
late = raises(RetryRequested, dagster_assets.orders, Context("2026-10-13"))
check("dagster: a late file asks to be tried again", late.args == (24, 30 * 60))
with gzip.open(files.format(ds="2026-10-13"), "wt") as day:
    day.write("order_id,status,amount\n3,paid,1.00\n3,paid,1.00\n")
dagster_assets.orders(Context("2026-10-13"))
check("dagster: the repeated order stored once", len(get("/partitions/orders/2026-10-13").splitlines()) == 1)
