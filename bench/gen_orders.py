#!/usr/bin/env python3
"""Writes N synthetic `orders` rows to stdout, for idem's benchmarks.

usage: bench/gen_orders.py N [--ds 2026-10-12] [--format ndjson|csv]
                             [--dup-every K] [--seed S]

Columns: order_id, ds, customer_id, status, amount, updated_at, note.
order_id runs from 1 to N; every row belongs to the day --ds. The other
values are drawn from a random generator seeded with --seed (default 42), so
the same arguments always give the same bytes. --dup-every K writes every
K-th row twice (the same order_id and values), as a source that delivers a
record again would. CSV has a header line; NDJSON is one object a line.
Python 3 standard library only.
"""
import argparse
import csv
import datetime
import json
import os
import random
import sys

COLUMNS = ["order_id", "ds", "customer_id", "status", "amount", "updated_at", "note"]
STATUSES = ["created", "paid", "shipped", "delivered", "cancelled", "refunded"]
NOTE_LETTERS = "abcdefghijklmnopqrstuvwxyz "


def order(order_id, ds, rng):
    """One order of the day `ds`, its values drawn from `rng`."""
    second_of_day = rng.randrange(24 * 3600)
    hh, mm, ss = second_of_day // 3600, second_of_day // 60 % 60, second_of_day % 60
    return {
        "order_id": order_id,
        "ds": ds,
        "customer_id": rng.randrange(1, 100_000),
        "status": rng.choice(STATUSES),
        "amount": round(rng.uniform(1, 5000), 2),
        "updated_at": f"{ds}T{hh:02d}:{mm:02d}:{ss:02d}Z",
        "note": "".join(rng.choices(NOTE_LETTERS, k=rng.randrange(40))),
    }


def orders(n, ds, dup_every, seed):
    """The n orders in order_id order, every dup_every-th one twice."""
    rng = random.Random(seed)
    for order_id in range(1, n + 1):
        row = order(order_id, ds, rng)
        yield row
        if dup_every and order_id % dup_every == 0:
            yield row


def write_ndjson(rows, out):
    for row in rows:
        out.write(json.dumps(row, separators=(",", ":")))
        out.write("\n")


def write_csv(rows, out):
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([row[c] for c in COLUMNS])


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def day(text):
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a YYYY-MM-DD date") from None


def main():
    parser = argparse.ArgumentParser(description="Synthetic orders rows for idem's benchmarks.")
    parser.add_argument("n", type=non_negative, help="how many orders")
    parser.add_argument("--ds", type=day, default="2026-10-12", help="the day of every row")
    parser.add_argument("--format", choices=["ndjson", "csv"], default="ndjson")
    parser.add_argument("--dup-every", type=non_negative, default=0, metavar="K",
                        help="write every K-th row twice (0: never)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    rows = orders(args.n, args.ds, args.dup_every, args.seed)
    write = write_ndjson if args.format == "ndjson" else write_csv
    try:
        write(rows, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        # A reader that stops early (`| head`) is not an error; the flush
        # at exit must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
