"""Where the example scripts keep their state, and a lock around it.

The directory is $EXAMPLE_STATE_DIR, or ./state beside the scripts. Each
"service" below is a JSON-lines file in it, changed under an exclusive
lock so that concurrent runs never interleave.
"""

import contextlib
import fcntl
import json
import os

DIR = os.environ.get("EXAMPLE_STATE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "state")


def path(name):
    os.makedirs(DIR, exist_ok=True)
    return os.path.join(DIR, name)


@contextlib.contextmanager
def locked(name):
    """Yields the records of the JSON-lines file name, holding its lock."""
    with open(path(name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = []
        if os.path.exists(path(name)):
            with open(path(name)) as f:
                records = [json.loads(line) for line in f if line.strip()]
        yield records


def append(name, record):
    """Appends one record to name; call it inside locked(name)."""
    with open(path(name), "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def note(line):
    """Appends a line to signals.log, for the demos to read."""
    with open(path("signals.log"), "a") as f:
        f.write(line + "\n")
