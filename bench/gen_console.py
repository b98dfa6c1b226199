#!/usr/bin/env python3
"""Writes NDJSON bodies for bench/console.sh to stdout.

usage: bench/gen_console.py events FIRST_DAY FROM_INDEX TO_INDEX [--seed S]
       bench/gen_console.py bad REJECTS [--good-every K] [--seed S]

`events`: the rows of the days FIRST_DAY + FROM_INDEX to FIRST_DAY +
TO_INDEX (both included), for a range PUT. Day i holds 3 to 50 rows, the
number drawn from a generator seeded with (S, i), so a day has the same rows
whichever range it is sent in. Columns id (i * 100 + n, unique over the
table), ds, qty.

`bad`: REJECTS bad rows for a day PUT to a `bad_rows: quarantine` table,
with a good row after every K-th bad one (default 1000; 0 for none). Of the
bad rows, about 70 % carry a qty too large for `integer` (3000000000), 25 % a
qty that is no number ("many"): both are errors of the column qty; 5 % are
the line `[1]`, which is no object: an error of the row itself. So the
rejects fall in two error groups (column `qty`, and the row's).

Same arguments, same bytes. Python 3 standard library only.
"""
import argparse
import datetime
import json
import random
import sys


def events(args, out):
    first = datetime.date.fromisoformat(args.first_day)
    for i in range(args.from_index, args.to_index + 1):
        rng = random.Random(f"{args.seed}:{i}")
        ds = (first + datetime.timedelta(days=i)).isoformat()
        for n in range(rng.randint(3, 50)):
            out.write(json.dumps({"id": i * 100 + n, "ds": ds, "qty": rng.randrange(1000)},
                                 separators=(",", ":")))
            out.write("\n")


def bad(args, out):
    rng = random.Random(args.seed)
    next_id = 1
    lines = []
    for n in range(1, args.rejects + 1):
        draw = rng.random()
        if draw < 0.70:
            lines.append('{"id":%d,"qty":3000000000}' % next_id)
        elif draw < 0.95:
            lines.append('{"id":%d,"qty":"many"}' % next_id)
        else:
            lines.append("[1]")
        next_id += 1
        if args.good_every and n % args.good_every == 0:
            lines.append('{"id":%d,"qty":%d}' % (next_id, rng.randrange(1000)))
            next_id += 1
        if len(lines) >= 10000:
            out.write("\n".join(lines))
            out.write("\n")
            lines.clear()
    if lines:
        out.write("\n".join(lines))
        out.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    ev = sub.add_parser("events")
    ev.add_argument("first_day")
    ev.add_argument("from_index", type=int)
    ev.add_argument("to_index", type=int)
    ev.add_argument("--seed", default="42")
    bd = sub.add_parser("bad")
    bd.add_argument("rejects", type=int)
    bd.add_argument("--good-every", type=int, default=1000)
    bd.add_argument("--seed", default="42")
    args = parser.parse_args()
    out = sys.stdout
    if args.what == "events":
        events(args, out)
    else:
        bad(args, out)
    out.flush()


if __name__ == "__main__":
    main()
