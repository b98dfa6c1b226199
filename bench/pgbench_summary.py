"""Reads pgbench's report on stdin and its per-transaction logs (--log
--log-prefix=PREFIX: PREFIX.<pid>, and PREFIX.<pid>.<n> for the other
threads of -j); prints: transactions/s p50_ms p99_ms failed, the form of
wrk_summary.py.

usage: python3 bench/pgbench_summary.py PREFIX < pgbench-report.txt

Transactions/s is pgbench's own `tps = ... (without initial connection time)`.
The percentiles are nearest-rank over every logged transaction's latency (the
third field of a log line, in microseconds, per `man pgbench` of version
15). `failed` is the larger of pgbench's count of failed transactions and the
number of log lines whose time is not a number (`failed`, `skipped`,
`serialization`, `deadlock`); pgbench itself exits non-zero when a client
aborts on an error.
"""
import glob
import math
import re
import sys

prefix = sys.argv[1]
report = sys.stdin.read()
tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", report, re.M)
if not tps:
    sys.exit(f"pgbench_summary: no tps line in pgbench's report:\n{report}")
reported = re.search(r"^number of failed transactions: (\d+)", report, re.M)

files = sorted(f for f in glob.glob(glob.escape(prefix) + ".*") if re.search(r"\.\d+(\.\d+)?$", f))
if not files:
    sys.exit(f"pgbench_summary: no log files {prefix}.<pid>")
latencies, not_timed = [], 0
for name in files:
    with open(name) as log:
        for line in log:
            fields = line.split()
            if len(fields) < 3:
                continue
            if fields[2].isdigit():
                latencies.append(int(fields[2]))
            else:
                not_timed += 1
failed = max(int(reported.group(1)) if reported else 0, not_timed)
if not latencies:
    sys.exit(f"pgbench_summary: no transactions in {', '.join(files)}")
latencies.sort()


def percentile_ms(p):
    """Nearest rank: the smallest latency with at least p % of them at or below it."""
    return latencies[max(0, math.ceil(p / 100 * len(latencies)) - 1)] / 1000


print(f"{float(tps.group(1)):.0f} {percentile_ms(50):.2f} {percentile_ms(99):.2f} {failed}")
