#!/usr/bin/env python3
"""Runs again, once, the tests of a meson test log that failed only because
Open MPI's MPI_Comm_spawn never returned.

Open MPI 4.1 with PMIx 4 (Debian 12's pair) has an intermittent hang in
MPI_Comm_spawn (openpmix/openpmix#2735, open-mpi/ompi#9713).  With PMIx's
default store about one spawn in a hundred never returned here; ppdiffuse
sets the hash store (pp-mpi-start.c), with which none did in several
hundred, but the hang is Open MPI's and may have other causes.  ppdiffuse
turns it into an error in bounded time ("spawning them (MPI_Comm_spawn)
did not finish within N ms"), which is right for the
element; a test that spawns dozens of meshes to check something else would
then fail now and then for a reason outside it.
Such a test, and only such a test, is run once more; its second result
replaces the first in the summary (tests/summary.py reads the retry log),
and the retry is printed, so it stays visible.

Usage: spawn-retry.py BUILD_DIR [SETUP]"""
import json
import os
import subprocess
import sys

SIGNATURE = "(MPI_Comm_spawn) did not finish within"
RETRY_BASE = "testlog-spawn-retry"
# Tests whose subject is that error (a spawn past its deadline on purpose):
# whatever failed in them, it was not Open MPI's hang.
EXPECT_THE_ERROR = ("start-failures-late-workers",)


def log_name(base, setup):
    return f"{base}-{setup}.json" if setup else f"{base}.json"


def spawn_hangs(path):
    names = []
    with open(path, encoding="utf-8") as log:
        for line in log:
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry["result"] in ("OK", "EXPECTEDFAIL", "SKIP"):
                continue
            if entry["name"].split(" / ")[-1] in EXPECT_THE_ERROR:
                continue
            output = (entry.get("stdout") or "") + (entry.get("stderr") or "")
            if SIGNATURE in output:
                names.append(entry["name"])
    return names


def main(build_dir, setup):
    logs = os.path.join(build_dir, "meson-logs")
    retry_log = os.path.join(logs, log_name(RETRY_BASE, setup))
    if os.path.exists(retry_log):
        os.remove(retry_log)
    names = spawn_hangs(os.path.join(logs, log_name("testlog", setup)))
    if not names:
        return 0
    print(f"== MPI_Comm_spawn never returned in {', '.join(names)}: "
          "running once more (Open MPI's intermittent spawn hang)",
          flush=True)
    command = ["meson", "test", "-C", build_dir, "--num-processes", "1",
               "--print-errorlogs", "--logbase", RETRY_BASE]
    if setup:
        command += ["--setup", setup]
    return subprocess.call(command + [n.split(" / ")[-1] for n in names])


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: spawn-retry.py BUILD_DIR [SETUP]")
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None))
