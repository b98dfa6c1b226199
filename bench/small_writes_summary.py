"""Prints bench/small_writes.sh's table from its summary file.

usage: small_writes_summary.py MACHINE SERVER SECONDS SUMMARY_TSV
         ONE_POSTS THREE_POSTS ONE_REPLAYS THREE_REPLAYS EACH_REPLAYS SCANS
SUMMARY_TSV: a line per step: step, goal (idem/pgbench), pgbench's work,
pgbench's "tx/s p50 p99 failed", idem's work, idem's "requests/s p50 p99 non-2xx",
and the CPU µs a transaction, then a request, of "client idem postgres"
(postgres "-" when it runs on another machine).
The rest compares one idem process with three (requests/s), EACH_REPLAYS the
three processes' replay rates (the first made the keys), SCANS the index
scans of the keys table during (d).
"""
import sys

machine, server, seconds, summary = sys.argv[1:5]
one_posts, three_posts, one_replays, three_replays = (float(v.split()[0]) for v in sys.argv[5:9])
each_replays = [float(v) for v in sys.argv[9].split(",")]
scans = int(sys.argv[10])

ok = lambda good: "ok" if good else "MISSED"

# The most CPU a request each step may cost (µs): idem's, and what it makes
# Postgres spend; by the step's label, the longest prefix first.
CPU_GOALS = {
    "(a)": (80, 120),
    "(b)": (300, 1000),
    "(c)": (25, 0),
    "(d)": (60, 50),
    "(e) 1 row": (100, 200),
    "(f)": (120, 250),
}


def cpu_goals(step):
    for label in sorted(CPU_GOALS, key=len, reverse=True):
        if step.startswith(label):
            return CPU_GOALS[label]
    return None


def print_headline(step, idem_cpu, cpu_table):
    """idem's CPU a request and Postgres's, against the step's goals."""
    _, idem, postgres = idem_cpu.split()
    goals = cpu_goals(step)
    judged = ""
    if goals and postgres != "-":
        good = int(idem) <= goals[0] and int(postgres) <= goals[1]
        judged = f" (goals <= {goals[0]} and <= {goals[1]}: {ok(good)})"
    print(f"    idem's CPU a request: {idem} µs; Postgres's CPU a request: {postgres} µs{judged}")
    cpu_table.append((step, idem, postgres, goals))


def print_cpu(pg_cpu, idem_cpu):
    """Where each side's CPU went, and the ratio the two totals allow: on
    shared cores, a side that needs more CPU a request cannot run faster."""
    pgbench, _, pg_postgres = pg_cpu.split()
    wrk, idem, idem_postgres = idem_cpu.split()
    if "-" in (pg_postgres, idem_postgres):
        print(f"    CPU µs: pgbench {pgbench} a transaction; wrk {wrk}, idem {idem} a request "
              "(Postgres is not on this machine)")
        return
    pg_total = int(pgbench) + int(pg_postgres)
    idem_total = int(wrk) + int(idem) + int(idem_postgres)
    print(f"    CPU µs a transaction: pgbench {pgbench} + Postgres {pg_postgres} = {pg_total}; "
          f"a request: wrk {wrk} + idem {idem} + Postgres {idem_postgres} = {idem_total} "
          f"(ratio at equal CPU: {pg_total / max(idem_total, 1):.2f})")


print()
print(f"machine: {machine}; PostgreSQL {server}; 32 connections, {seconds} s each")
print(f"{'':44} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
bad = []
cpu_table = []
for line in open(summary):
    step, goal, pg_what, pg, idem_what, idem, pg_cpu, idem_cpu = line.rstrip("\n").split("\t")
    pg_rps, pg50, pg99, pg_bad = pg.split()
    rps, p50, p99, non2xx = idem.split()
    print(step)
    print_headline(step, idem_cpu, cpu_table)
    print(f"    pgbench: {pg_what:<34} {float(pg_rps):10,.0f} {float(pg50):8.2f} {float(pg99):8.2f}   failed {pg_bad}")
    print(f"    idem: {idem_what:<37} {float(rps):10,.0f} {float(p50):8.2f} {float(p99):8.2f}   non-2xx {non2xx}")
    ratio = float(rps) / float(pg_rps)
    print(f"    ratio idem/pgbench: {ratio:.2f} (goal >= {goal}: {ok(ratio >= float(goal))})")
    print_cpu(pg_cpu, idem_cpu)
    if int(pg_bad) or int(non2xx):
        bad.append(step)
print("3 processes against one")
print(f"    1-row POSTs: {three_posts:,.0f} against {one_posts:,.0f} requests/s: "
      f"{three_posts / one_posts:.2f} (goal >= 1.0: {ok(three_posts >= one_posts)})")
print(f"    replays not remembered: {three_replays:,.0f} against {one_replays:,.0f} requests/s: "
      f"{three_replays / one_replays:.2f} (goal >= 1.0: {ok(three_replays >= one_replays)})")
others = each_replays[1:]
print(f"    replays per process: {', '.join(f'{r:,.0f}' for r in each_replays)} (the first made the keys; "
      f"the others at {min(others) / each_replays[0]:.2f} of its rate)")
print(f"(d) index scans of idem.idempotency_keys during its replays: {scans:,} "
      "(one or more per replay read from the database)")
print()
print(f"{'the CPU a request, µs':52} {'idem':>6} {'goal':>6} {'Postgres':>9} {'goal':>6}")
for step, idem, postgres, goals in cpu_table:
    idem_goal, pg_goal = (str(g) for g in goals) if goals else ("", "")
    print(f"{step[:52]:52} {idem:>6} {idem_goal:>6} {postgres:>9} {pg_goal:>6}")
if bad:
    sys.exit(f"bench: FAILED requests or transactions in {', '.join(bad)}: the figures above do not count")
