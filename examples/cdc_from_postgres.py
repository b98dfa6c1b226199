#!/usr/bin/env python3
"""Change data capture: a source Postgres's changes into idem, each exactly once.

    IDEM_URL=http://127.0.0.1:8080 IDEM_TOKEN=... \\
    python3 examples/cdc_from_postgres.py --source 'host=db dbname=shop user=cdc' \\
        --slot idem_shop --table public.customers=customers [--table ...] [--once]

It reads a logical replication slot (plugin `test_decoding`, which ships with
Postgres) on the source with `pg_logical_slot_peek_changes`, and sends each
source transaction's changes of a table as one `POST /rows` on the channel
`<CHANNEL>.<idem table>` (CHANNEL defaults to the slot's name), with the
transaction's commit LSN as the offset (`offset_kind=lsn`). Inserts and
updates are merge rows, deletes tombstones (`"_deleted": true`); every row
carries `change_lsn`, the change's LSN as a number, which the idem table
takes as its cursor, so that several changes of one key in one transaction
resolve to the last. idem commits the offset in the rows' transaction;
only then does the example advance the slot (`pg_replication_slot_advance`).
Killed at any moment and started again, it asks idem for each channel's
committed offset (`GET /channels/{name}`) and skips the transactions at or
below it: the slot may replay them, idem never writes them twice.

Needs: Python 3 (stdlib only) and `psql` on PATH; on the source
`wal_level=logical` (a restart), a free replication slot
(`max_replication_slots`) and a role with the REPLICATION attribute (or a
superuser); each replicated table with a primary key (deletes carry only the
key, as `REPLICA IDENTITY DEFAULT` logs it; a partitioned idem table needs
its partition column in the deletes: `alter table ... replica identity full`).
The idem table has the source's columns plus `change_lsn bigint` as its
cursor and the source's primary key, e.g.

    curl -X PUT "$IDEM_URL/tables/customers" -H "authorization: Bearer $IDEM_TOKEN" \\
      -H 'content-type: application/json' -d '{"columns": {"id": "bigint",
      "name": "text", "change_lsn": "bigint"}, "partition_by": null,
      "primary_key": ["id"], "cursor": "change_lsn"}'

The slot captures changes from its creation on (the example creates it when
it is missing): load the rows already there first (e.g. `idem put --whole`
of a COPY), or create the slot before the source gets writes. A slot holds
WAL on the source until it is advanced: drop it
(`select pg_drop_replication_slot('idem_shop')`) when the feed stops for
good. Not replicated (the example stops and says so): TRUNCATE, and an update
that leaves a large (TOASTed) value unchanged (`replica identity full` does
not help there; update the value too, or re-seed the table).

Exit codes: 0 after --once drained the slot, 1 refused by idem or the source
(the message says why), 2 interrupted.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# Source changes read per peek: whole transactions are returned, so a
# transaction larger than this comes in one peek anyway.
PEEK_CHANGES = 2000


class Stop(Exception):
    """Something a retry cannot cure: the message says what."""


def main():
    args = parse_args()
    feed = Feed(args)
    try:
        feed.ensure_slot()
        feed.run(once=args.once, poll=args.poll)
    except Stop as stop:
        print(f"cdc_from_postgres: {stop}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 2
    return 0


def parse_args():
    parser = argparse.ArgumentParser(
        description="Stream a Postgres's changes into idem tables, each once.")
    parser.add_argument("--source", required=True,
                        help="the source's connection string, as psql takes it")
    parser.add_argument("--slot", required=True,
                        help="the logical replication slot (created when missing)")
    parser.add_argument("--channel", help="the channels' prefix (default: the slot)")
    parser.add_argument("--table", action="append", required=True, metavar="SOURCE[=TARGET]",
                        help="a source table (schema.name; public when bare) and its "
                             "idem table (default: its name); repeat for more")
    parser.add_argument("--once", action="store_true",
                        help="send what the slot holds, then exit")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="seconds between peeks when nothing is new")
    parser.add_argument("--url", default=os.environ.get("IDEM_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("IDEM_TOKEN"))
    args = parser.parse_args()
    args.tables = dict(table_mapping(t) for t in args.table)
    args.channel = args.channel or args.slot
    return args


def table_mapping(text):
    """`schema.name=target` → ("schema.name", "target")."""
    source, _, target = text.partition("=")
    if "." not in source:
        source = f"public.{source}"
    return source, target or source.split(".", 1)[1]


class Feed:
    """The slot, the idem server, and the offset each channel committed."""

    def __init__(self, args):
        self.args = args
        self.idem = Idem(args.url, args.token)
        self.channels = {target: f"{args.channel}.{target}" for target in args.tables.values()}
        self.committed = {}

    def ensure_slot(self):
        slot = sql_literal(self.args.slot)
        psql(self.args.source,
             f"select pg_create_logical_replication_slot({slot}, 'test_decoding') "
             f"where not exists (select from pg_replication_slots where slot_name = {slot})")

    def run(self, once, poll):
        # What idem committed, asked once: from here on this process is the
        # channels' only writer.
        for target, channel in self.channels.items():
            self.committed[target] = self.idem.committed_lsn(channel)
        while True:
            transactions = self.peek()
            for transaction in transactions:
                self.send(transaction)
            if transactions:
                self.advance(transactions[-1].commit_lsn)
            elif once:
                return
            else:
                time.sleep(poll)

    def peek(self):
        """The slot's next transactions, whole, in commit order."""
        query = (
            "select coalesce(json_agg(json_build_array(lsn::text, data) order by n), '[]') "
            "from pg_logical_slot_peek_changes("
            f"{sql_literal(self.args.slot)}, null, {PEEK_CHANGES}, "
            "'include-xids', '0', 'skip-empty-xacts', '1') with ordinality as c(lsn, xid, data, n)"
        )
        return transactions(json.loads(psql(self.args.source, query)), self.args.tables)

    def send(self, transaction):
        """The transaction's rows of each table, on its channel, unless
        idem committed its commit LSN (a replay after a kill)."""
        for target, rows in transaction.rows.items():
            if transaction.commit_lsn <= self.committed[target]:
                continue
            self.idem.post(target, self.channels[target], transaction.commit_text, rows)
            self.committed[target] = transaction.commit_lsn

    def advance(self, lsn):
        # Only after idem committed: a kill before this line replays the
        # transactions from the slot, and `send` skips them.
        psql(self.args.source,
             f"select pg_replication_slot_advance({sql_literal(self.args.slot)}, "
             f"'{lsn_text(lsn)}'::pg_lsn)")


class Transaction:
    def __init__(self):
        self.rows = {}
        self.commit_lsn = 0
        self.commit_text = ""


def transactions(changes, tables):
    """test_decoding's rows ([lsn, data]) → transactions with their rows per
    idem table (changes of other tables are read past)."""
    done, current = [], None
    for lsn, data in changes:
        if data == "BEGIN" or data.startswith("BEGIN "):
            current = Transaction()
        elif data == "COMMIT" or data.startswith("COMMIT "):
            current.commit_lsn, current.commit_text = lsn_number(lsn), lsn
            done.append(current)
            current = None
        elif data.startswith("table ") and current is not None:
            source, row = change_row(data, lsn_number(lsn))
            if source in tables and row is not None:
                current.rows.setdefault(tables[source], []).extend(row)
    return done


def change_row(data, change_lsn):
    """`table public.t: UPDATE: id[integer]:1 name[text]:'x'` → ("public.t",
    [rows]). An update of the key is a tombstone of the old key and the new
    row."""
    head, _, rest = data[len("table "):].partition(": ")
    source = ".".join(unquote_ident(part) for part in split_qualified(head))
    action, _, tuples = rest.partition(":")
    tuples = tuples.strip()
    if action == "TRUNCATE":
        raise Stop(f"TRUNCATE of {source}: not replicated; re-seed the idem table")
    if "unchanged-toast-datum" in tuples:
        raise Stop(f"an update of {source} left a large (TOASTed) value out of the log; "
                   "update it too, or re-seed the idem table")
    if tuples == "(no-tuple-data)":
        raise Stop(f"a {action} of {source} logged no key: give the table a primary key")
    if action == "DELETE":
        return source, [dict(parse_columns(tuples), _deleted=True, change_lsn=change_lsn)]
    rows = []
    if tuples.startswith("old-key: "):
        old, _, tuples = tuples[len("old-key: "):].partition(" new-tuple: ")
        # The key changed (or the table logs whole old rows): the old key
        # goes, just before the new row comes (one less than its LSN, which
        # is past any earlier change), so that when the key is the same the
        # new row outranks the tombstone.
        rows.append(dict(parse_columns(old), _deleted=True, change_lsn=change_lsn - 1))
    rows.append(dict(parse_columns(tuples), change_lsn=change_lsn))
    return source, rows


def parse_columns(text):
    """`id[integer]:1 name[text]:'it''s' n[numeric]:null` → {column: value}."""
    values, i = {}, 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        name, i = read_ident(text, i)
        type_end = text.index("]:", i)
        column_type, i = text[i + 1:type_end], type_end + 2
        raw, quoted, i = read_value(text, i)
        values[name] = json_value(raw, quoted, column_type)
    return values


def read_ident(text, i):
    if text[i] == '"':
        j, out = i + 1, []
        while True:
            if text[j] == '"' and text[j + 1:j + 2] == '"':
                out.append('"')
                j += 2
            elif text[j] == '"':
                return "".join(out), j + 1
            else:
                out.append(text[j])
                j += 1
    j = text.index("[", i)
    return text[i:j], j


def read_value(text, i):
    """A value at `i`: quoted ('' for a quote inside) or up to a space."""
    if text[i] != "'":
        j = text.find(" ", i)
        j = len(text) if j < 0 else j
        return text[i:j], False, j
    j, out = i + 1, []
    while True:
        k = text.index("'", j)
        out.append(text[j:k])
        if text[k + 1:k + 2] == "'":
            out.append("'")
            j = k + 2
        else:
            return "".join(out), True, k + 1


def json_value(raw, quoted, column_type):
    """A test_decoding value as idem takes it: numbers and booleans are
    unquoted in the log; numeric stays text, so that no digit is lost."""
    if quoted:
        return raw
    if raw == "null":
        return None
    if column_type in ("smallint", "integer", "bigint", "oid"):
        return int(raw)
    if column_type == "boolean":
        return raw == "true"
    if column_type in ("real", "double precision") and raw not in ("NaN", "Infinity", "-Infinity"):
        return float(raw)
    return raw


def split_qualified(name):
    """`public."My Table"` → ['public', '"My Table"'] (dots in quotes kept)."""
    parts, current, quoted = [], [], False
    for ch in name:
        if ch == '"':
            quoted = not quoted
        if ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def unquote_ident(part):
    if part.startswith('"') and part.endswith('"'):
        return part[1:-1].replace('""', '"')
    return part


def lsn_number(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_text(number):
    return f"{number >> 32:X}/{number & 0xFFFFFFFF:X}"


def sql_literal(text):
    return "'" + text.replace("'", "''") + "'"


def psql(conninfo, query):
    """One statement on the source; its output, unaligned and bare."""
    result = subprocess.run(
        ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", query],
        capture_output=True, text=True)
    if result.returncode != 0:
        raise Stop(f"psql: {result.stderr.strip()}")
    return result.stdout.strip()


class Idem:
    """The idem server: what a channel committed, and POSTs retried until
    they are answered (a retry is safe: an offset is committed once)."""

    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def committed_lsn(self, channel):
        status, body = self.request("GET", f"/channels/{urllib.parse.quote(channel, safe='')}")
        if status == 404 and body.get("code") == "channel_not_found":
            return 0
        if status != 200:
            raise Stop(f"GET /channels/{channel}: {status} {body}")
        return lsn_number(body["committed_offset"])

    def post(self, table, channel, offset, rows):
        query = urllib.parse.urlencode(
            {"table": table, "channel": channel, "offset": offset, "offset_kind": "lsn"})
        data = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
        status, body = self.request("POST", f"/rows?{query}", data.encode())
        if status != 200:
            raise Stop(f"POST /rows?{query}: {status} {body}")
        return body

    def request(self, method, path, data=None):
        """(status, JSON body); no answer, a 5xx, a 409 or a 429 is retried
        with growing waits (up to about a minute between attempts)."""
        wait = 0.2
        while True:
            request = urllib.request.Request(self.url + path, data=data, method=method)
            request.add_header("accept", "application/json")
            if data is not None:
                request.add_header("content-type", "application/x-ndjson")
            if self.token:
                request.add_header("authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    return response.status, json.load(response)
            except urllib.error.HTTPError as error:
                body = error.read()
                answer = json.loads(body) if body.startswith(b"{") else {"text": body[:200]}
                final = error.code == 409 and answer.get("code") == "channel_kind"
                if final or (error.code < 500 and error.code not in (408, 409, 429)):
                    return error.code, answer
                reason = f"{error.code} {answer.get('code', '')}"
            except (urllib.error.URLError, OSError) as error:
                reason = str(error)
            print(f"cdc_from_postgres: {method} {path}: {reason}; retrying in {wait:.1f} s",
                  file=sys.stderr)
            time.sleep(wait)
            wait = min(wait * 2, 60)


if __name__ == "__main__":
    sys.exit(main())
