"""Reconciles a charge: was $LEASEHOLD_OPERATION_ID applied?

Exit 0 and the charge's result on stdout if it was, 1 if it was not.
"""

import json
import os
import sys

import state

op = os.environ["LEASEHOLD_OPERATION_ID"]
with state.locked("payments") as payments:
    for p in payments:
        if p["op"] == op:
            print(json.dumps({"charged": op, "cents": p["cents"]}))
            sys.exit(0)
sys.exit(1)
