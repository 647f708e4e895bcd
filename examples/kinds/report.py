"""Builds a monthly report and delivers it to the outbox: kind "report".

Its service kind is dedup: the outbox is a tiny service that keeps each
delivery under the operation ID it was given and ignores a second
delivery of the same ID, so running this again after a crash delivers
the report once. "seconds" makes the report take that long (the demos'
long-running step); signals.log notes its start and a SIGTERM, which
stops it with exit 75 (EX_TEMPFAIL: nothing was delivered, try again).
"""

import json
import os
import signal
import sys
import time

import state

op = os.environ["LEASEHOLD_OPERATION_ID"]
payload = json.load(sys.stdin)


def stopped(signum, frame):
    state.note("SIGTERM " + op)
    sys.exit(75)


signal.signal(signal.SIGTERM, stopped)
state.note("started " + op)

deadline = time.monotonic() + float(payload.get("seconds", 0))
while time.monotonic() < deadline:
    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

report = {"customer": payload["customer"], "month": payload["month"], "lines": 3}
with state.locked("outbox") as outbox:
    if not any(r["op"] == op for r in outbox):
        state.append("outbox", {"op": op, "report": report})
        print("delivered", file=sys.stderr)
    else:
        print("already delivered", file=sys.stderr)
print(json.dumps({"report": op, "lines": 3}))
