#!/usr/bin/env python3
"""Runs a command each time idem publishes a change to a table: what a
Dagster sensor or a cache refresh needs, with the standard library only.

It follows GET /loads/events?table=TABLE (Server-Sent Events), keeps the id
of the last event it handled in STATE_FILE (so that after a restart it
resumes there, and misses nothing committed while it was away), and for
each load whose status is "published" (rows changed; "unchanged" ones are
skipped) runs COMMAND with IDEM_TABLE, IDEM_DS, IDEM_MODE and IDEM_LOAD_ID
set. Without STATE_FILE it starts from now.

usage: on_published.py [--once] TABLE STATE_FILE COMMAND [ARG...]
       (IDEM_URL, IDEM_TOKEN from the environment)
  --once  stop after the first published load (for a test or a cron job)
"""
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request


def events(url, token, last_id):
    """Yields (id, event, data) of the stream, resuming after last_id."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if last_id is not None:
        request.add_header("Last-Event-ID", str(last_id))
    with urllib.request.urlopen(request) as stream:
        event, event_id, data = None, None, []
        for raw in stream:
            line = raw.decode("utf-8").rstrip("\n")
            if line == "":
                if event is not None:
                    yield event_id, event, "".join(data)
                event, event_id, data = None, None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())


def main(argv):
    once = argv[:1] == ["--once"]
    if once:
        argv = argv[1:]
    if len(argv) < 3:
        sys.exit(__doc__)
    table, state_file, command = argv[0], argv[1], argv[2:]
    base = os.environ.get("IDEM_URL", "http://127.0.0.1:8080").rstrip("/")
    url = f"{base}/loads/events?" + urllib.parse.urlencode({"table": table})
    token = os.environ.get("IDEM_TOKEN")
    last_id = None
    if os.path.exists(state_file):
        with open(state_file) as f:
            last_id = int(f.read().strip() or 0)
    while True:
        for event_id, event, data in events(url, token, last_id):
            if event == "close":
                break  # the stream's lifetime: resume from last_id
            if event != "load":
                continue
            load = json.loads(data)
            if load["status"] == "published":
                env = dict(os.environ, IDEM_TABLE=load["table"], IDEM_DS=load["ds"] or "",
                           IDEM_MODE=load["mode"], IDEM_LOAD_ID=load["load_id"])
                subprocess.run(command, env=env, check=True)
            last_id = event_id
            with open(state_file + ".tmp", "w") as f:
                f.write(str(last_id))
            os.replace(state_file + ".tmp", state_file)
            if once and load["status"] == "published":
                return


if __name__ == "__main__":
    main(sys.argv[1:])
