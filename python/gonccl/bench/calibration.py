"""The time estimator's calibration file (GONCCL_CALIBRATION): measured times of the
collectives per host, number of ranks and transport, which gonccl fits its cost
model's rates to at a communicator's first estimate (core/calibration.go reads it).

Layout (JSON):
    {"format": "gonccl-calibration/1",
     "entries": [{"host": "...", "nranks": 2, "transport": "shm", "measured": "...",
                  "points": [{"op": "all_reduce", "bytes": 8, "us": 61.2}, ...]}]}
`bytes` is the size the estimator takes: all_reduce the buffer, all_gather each
rank's input, reduce_scatter each rank's output; `us` the time from issue to
completion of one op, each op waited before the next.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile

FORMAT = "gonccl-calibration/1"


def path() -> str | None:
    """The file gonccl reads: GONCCL_CALIBRATION, else ~/.cache/gonccl/calibration.json;
    None for GONCCL_CALIBRATION=none."""
    p = os.environ.get("GONCCL_CALIBRATION", "")
    if p == "none":
        return None
    return p or os.path.join(os.path.expanduser("~"), ".cache", "gonccl", "calibration.json")


def transport(nranks: int) -> str:
    """How this job's ranks reach each other, as gonccl decides it: shared memory when
    every rank is on this host (and GONCCL_SHM_DISABLE is not 1), else TCP."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", nranks))
    return "shm" if local == nranks and os.environ.get("GONCCL_SHM_DISABLE", "0") != "1" else "tcp"


def key(nranks: int) -> dict:
    """The fields an entry must match for a communicator of nranks in this job."""
    return {"host": socket.gethostname(), "nranks": nranks, "transport": transport(nranks)}


def read(file: str) -> dict:
    """The file's contents, or an empty calibration if there is none; ValueError if it
    is not a calibration file."""
    try:
        with open(file) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"format": FORMAT, "entries": []}
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise ValueError(f"{file} is not a {FORMAT} file")
    return data


def find(file: str, nranks: int) -> dict | None:
    """The entry of file that a communicator of nranks in this job would use (None: none)."""
    try:
        entries = read(file)["entries"]
    except ValueError:
        return None
    want = key(nranks)
    found = None
    for e in entries:
        if all(e.get(k) == v for k, v in want.items()):
            found = e
    return found


def write(file: str, entry: dict) -> None:
    """Adds entry to file, replacing one for the same host, ranks and transport; writes
    through a temporary file and a rename, so a reader never sees half a file. A file
    that is not a calibration file is replaced."""
    try:
        data = read(file)
    except ValueError:
        data = {"format": FORMAT, "entries": []}
    same = ("host", "nranks", "transport")
    data["entries"] = [e for e in data["entries"] if any(e.get(k) != entry[k] for k in same)] + [entry]
    os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(file)), prefix=".calibration-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, file)
    except BaseException:
        os.unlink(tmp)
        raise
