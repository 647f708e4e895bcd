"""Charges a customer: kind "charge".

Its service kind is queryable: the payment ledger applies every charge it
is sent (it does not deduplicate), but charge_status.py can say whether
an operation was applied. "pause_seconds" holds the command between the
charge and its exit, where the demo kills the worker.
"""

import json
import os
import sys
import time

import state

op = os.environ["LEASEHOLD_OPERATION_ID"]
payload = json.load(sys.stdin)

with open(state.path("charge.pid"), "w") as f:
    f.write(str(os.getpid()))
with state.locked("payments") as payments:
    state.append("payments", {"op": op, "cents": payload["cents"]})
time.sleep(float(payload.get("pause_seconds", 0)))
print(json.dumps({"charged": op, "cents": payload["cents"]}))
