"""Schemathesis hooks for scripts/spec-fuzz: how idem's row bodies go on the wire.

openapi.yaml describes an NDJSON or CSV body by the rows it carries (an array
of objects), as it does a JSON body. Schemathesis generates such rows but only
knows how to send JSON, so these serializers write them as NDJSON (one object
a line) and as CSV (a header naming every field, then one record a row).

A body whose request says `Content-Encoding: gzip` is gzipped, as the header
promises (JSON bodies too).

A valid Idempotency-Key is made distinct per request (see `before_call`), and
the rows of a `POST /rows` get a partition value (see `flatmap_body`); an
invalid body goes without its channel (see `without_channel`).

A generated value that is not an array of objects (negative testing) has no
NDJSON or CSV form of its own; it is sent as the nearest thing a client could
send by mistake: a line that is not an object, or a CSV whose record does not
fit its header, which idem must refuse. Unless the request is under
`bad_rows=quarantine` (the parameter, or the policy of a table the fuzzer
declared): then idem keeps such a record as a reject and answers 200, as
documented, which the schema cannot say. A request whose body is the part
generated to be invalid goes under `bad_rows=reject` (see `before_call`).
"""

import gzip
import hashlib
import json
import re

import schemathesis
from hypothesis import strategies as st
from schemathesis.core.parameters import ParameterLocation

NDJSON_TYPES = (
    "application/x-ndjson",
    "application/jsonl",
    "application/ndjson",
    "application/x-jsonl",
    "application/jsonlines",
)


def raw_bytes(value):
    """Bytes a generator drew as they are (raw bytes in an example, or a
    `format: binary` value), else None."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    data = getattr(value, "data", None)
    return data if isinstance(data, bytes) else None


def to_json(value):
    """JSON text; raw bytes nested in a value are taken as UTF-8 text."""
    return json.dumps(
        value,
        ensure_ascii=False,
        default=lambda v: (raw_bytes(v) or b"").decode("utf-8", "replace"),
    )


def encoded(ctx, text):
    """The body's bytes, gzipped when the request's Content-Encoding says so."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    headers = ctx.case.headers or {}
    encoding = next((v for k, v in headers.items() if k.lower() == "content-encoding"), "")
    if str(encoding).strip().lower() in ("gzip", "x-gzip"):
        return gzip.compress(data)
    return data


@schemathesis.serializer("application/json")
def json_body(ctx, value):
    data = raw_bytes(value)
    return encoded(ctx, data if data is not None else to_json(value))


@schemathesis.serializer(*NDJSON_TYPES)
def ndjson(ctx, value):
    if raw_bytes(value) is not None:
        return encoded(ctx, raw_bytes(value))
    if isinstance(value, list):
        lines = [to_json(item) for item in value]
    else:
        lines = [to_json(value)]
    return encoded(ctx, "".join(line + "\n" for line in lines))


def csv_field(value):
    """A field as Postgres's CSV reads it: NULL is an empty unquoted field,
    anything else is quoted (so the empty string is `""`), and a nested value
    is JSON text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (dict, list)):
        text = to_json(value)
    else:
        text = str(value)
    return '"' + text.replace('"', '""') + '"'


def csv_record(fields):
    return ",".join(fields) + "\n"


@schemathesis.serializer("text/csv")
def csv_rows(ctx, value):
    if raw_bytes(value) is not None:
        return encoded(ctx, raw_bytes(value))
    if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
        # Not rows: a header and a record with one field too many.
        return encoded(ctx, csv_record(["not_rows"]) + csv_record([csv_field(value), "x"]))
    header = list(dict.fromkeys(name for row in value for name in row))
    if not header:
        return encoded(ctx, "")
    lines = [csv_record(csv_field(name) for name in header)]
    lines += [csv_record(csv_field(row.get(name)) for name in header) for row in value]
    return encoded(ctx, "".join(lines))


VALID_KEY = re.compile(r'[!-~]{1,255}|"[!-~]{1,255}"')


def request_digest(case):
    """A short digest of what the Idempotency-Key fingerprint covers."""
    parts = [
        case.method,
        case.formatted_path,
        repr(sorted((case.query or {}).items())),
        str(case.media_type),
        to_json(case.body) if case.body is not None else "",
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


def body_is_negative(case):
    """Whether the body was generated to violate its schema."""
    meta = getattr(case, "meta", None)
    body = meta.components.get(ParameterLocation.BODY) if meta is not None else None
    return body is not None and body.mode.is_negative


def reject_bad_rows(case):
    """An invalid body must be refused, so it goes under `bad_rows=reject`
    (overriding the table's policy), unless the drawn `bad_rows` is itself
    invalid, which idem refuses anyway."""
    if not body_is_negative(case):
        return
    if case.query is None:
        case.query = {}
    if isinstance(case.query, dict) and case.query.get("bad_rows", "quarantine") == "quarantine":
        case.query["bad_rows"] = "reject"


def without_channel(case):
    """A POST on a channel whose offset is committed already answers 200
    (`"committed": false`) without reading its body as rows, valid or not. An
    invalid body must be refused, so it goes without its channel: then it is
    read, and refused (or, without an Idempotency-Key, the request is)."""
    if not body_is_negative(case) or not isinstance(case.query, dict):
        return
    for name in ("channel", "offset", "offset_kind"):
        case.query.pop(name, None)


# The operations whose body is rows (a bad one refused under bad_rows=reject).
WRITES_OF_ROWS = (
    "/rows",
    "/partitions/{table}/{ds}",
    "/partitions/{table}",
    "/tables/{table}/rows",
    "/loads/{load_id}/parts/{n}",
)


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """Generators draw few distinct short strings, so most requests would
    reuse a key another request used and be refused with 422
    (`idempotency_key_reused`) before they reach the write. A valid key gets
    a digest of the request added: different requests get different keys,
    and the same request sent again keeps its key and is replayed. Invalid
    keys (negative testing) are sent as drawn."""
    if ctx.operation is not None and ctx.operation.path in WRITES_OF_ROWS:
        reject_bad_rows(case)
    if ctx.operation is not None and ctx.operation.path == "/rows":
        without_channel(case)
    headers = case.headers or {}
    for name, key in list(headers.items()):
        if name.lower() != "idempotency-key" or not isinstance(key, str) or key == '""':
            continue
        if not VALID_KEY.fullmatch(key):
            continue
        digest = request_digest(case)
        if key.startswith('"') and key.endswith('"') and len(key) > 2:
            headers[name] = '"' + key[1:-1][:200] + "." + digest + '"'
        else:
            headers[name] = key[:200] + "." + digest


# A few days, so that writes of different requests meet in one partition.
DAYS = st.sampled_from(["2026-10-11", "2026-10-12", "2026-10-13"])


@schemathesis.hook
def flatmap_body(ctx, body):
    """Each row of a `POST /rows` names its own partition. A generator that
    knows only `Row` leaves it out, and idem refuses every such row (422), so
    no request would write. A row without `ds` (the partition column of a
    table created by a write) gets one of a few days; a row that has one
    keeps it, whatever it is."""
    if ctx.operation is None or ctx.operation.path != "/rows" or not isinstance(body, list):
        return st.just(body)

    def with_days(days):
        return [
            dict(row, ds=day) if isinstance(row, dict) and "ds" not in row else row
            for row, day in zip(body, days)
        ]

    return st.lists(DAYS, min_size=len(body), max_size=len(body)).map(with_days)
