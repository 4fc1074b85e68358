#!/usr/bin/env python3
"""Runs again, once, the tests of a meson test log that failed only because
of a fault of Open MPI's own, not of what the test checks.

Two faults of Open MPI 4.1 with PMIx 4 (Debian 12's pair) are retried:

- MPI_Comm_spawn never returns (openpmix/openpmix#2735,
  open-mpi/ompi#9713).  With PMIx's default store about one spawn in a
  hundred never returned here; ppdiffuse sets the hash store
  (pp-mpi-start.c), with which it is rarer.  What remains has the
  symptom of openpmix/openpmix#2967: one new worker's first request (for
  its job's data) lies unread in the receive queue of the daemon's
  socket, so that worker waits in PMIx_Init and the others in MPI_Init's
  fence; two processes that each start meshes side by side on two cores
  met it in about one spawn in 200.  ppdiffuse turns it into an error in bounded
  time ("spawning them (MPI_Comm_spawn) did not finish within N ms").
- Open MPI's daemon crashes: the runtime process that MPI_Init forks for a
  singleton rank 0 (the pmix server of its workers) segfaults in its own
  code, every frame of its backtrace in Open MPI, PMIx, libevent or the C
  library.  Its handler of a process's help message (pmix_server_log_fn,
  which a worker's Open MPI warning reached) crashed so in two CI runs, at
  start; the workers then lose their daemon and exit.  ppdiffuse now keeps
  its processes' warnings away from the daemon (pp-ompi-help.h), but the
  daemon may crash in other ways.  ppdiffuse
  reports it ("Open MPI's daemon on HOST (pid P, …) crashed with
  Segmentation fault (11), a fault of Open MPI …"), which is right for the
  element.

A test that spawns dozens of meshes to check something else would then
fail now and then for a reason outside it.  Such a test, and only such a
test, is run once more; its second result replaces the first in the
summary (tests/summary.py reads the retry log), and the retry is printed
with its reason, so it stays visible.  A test whose second run failed by
such a fault again (break-it-stop-in-flight started 50 meshes a run,
and two busy cores once met the hang in both) runs a third time, its
result then in the retry log in the place of the second, also printed.

Usage: ompi-retry.py BUILD_DIR [SETUP]
       ompi-retry.py --list LOG   (the tests it would run again, and why)"""
import json
import os
import re
import subprocess
import sys

SPAWN_HANG = "(MPI_Comm_spawn) did not finish within"
RETRY_BASE = "testlog-ompi-retry"
# Tests whose subject is one of those faults, made on purpose (a spawn
# past its deadline, a daemon killed, the warning the daemon crashed on):
# whatever failed in them, it was not Open MPI's own.
ON_PURPOSE = ("start-failures-late-workers", "start-failures-daemon-crash",
              "break-it-daemon-killed", "break-it-stray-connection")
# Open MPI's signal handler prints, for a process that got a fatal signal,
# "[host:pid] *** Process received signal ***" and then its frames,
# "[host:pid] [ n] /path/object(symbol+off)[address]", on lines of their
# own or run together in one line (as the element's error quotes them).
SIGNALLED = re.compile(r"\[([^\s\]:]+):(\d+)\] \*\*\* Process received signal")
FRAME = re.compile(r"\[([^\s\]:]+):(\d+)\] \[ *\d+\] ([^\s(\[]+)")
# The objects of Open MPI's runtime, and those it runs on.
OMPI_OBJECT = re.compile(r"^(libopen-rte|libopen-pal|libpmix|mca_|orted$)")
RUNTIME_OBJECT = re.compile(r"^(libc|libpthread|libevent[a-z_]*|ld-linux[-\w]*)[.-]")


def daemon_crashes(output):
    """The processes whose backtrace in @output lies wholly in Open MPI's
    runtime (at least one frame of Open MPI itself), as 'host:pid'."""
    signalled = {(m.group(1), m.group(2)) for m in SIGNALLED.finditer(output)}
    frames = {}
    for m in FRAME.finditer(output):
        key = (m.group(1), m.group(2))
        if key in signalled:
            frames.setdefault(key, set()).add(os.path.basename(m.group(3)))
    crashed = []
    for key, objects in sorted(frames.items()):
        ompi = [o for o in objects if OMPI_OBJECT.match(o)]
        foreign = [o for o in objects
                   if not OMPI_OBJECT.match(o) and not RUNTIME_OBJECT.match(o)]
        if ompi and not foreign:
            crashed.append(f"{key[0]}:{key[1]}")
    return crashed


def open_mpi_fault(entry):
    """Why @entry (a meson log entry) failed by a fault of Open MPI's own,
    or None when it did not (or did not fail)."""
    if (entry["result"] in ("OK", "EXPECTEDFAIL", "SKIP")
            or entry["name"].split(" / ")[-1] in ON_PURPOSE):
        return None
    output = (entry.get("stdout") or "") + (entry.get("stderr") or "")
    crashed = daemon_crashes(output)
    if crashed:
        return f"Open MPI's daemon crashed (pid {', '.join(crashed)})"
    if SPAWN_HANG in output:
        return "MPI_Comm_spawn never returned"
    return None


def faults(path):
    """[(test name, reason)] of the log at @path."""
    found = []
    with open(path, encoding="utf-8") as log:
        for line in log:
            if not line.strip():
                continue
            entry = json.loads(line)
            reason = open_mpi_fault(entry)
            if reason:
                found.append((entry["name"], reason))
    return found


def log_name(base, setup):
    return f"{base}-{setup}.json" if setup else f"{base}.json"


AGAIN_BASE = RETRY_BASE + "-again"


def run_tests(build_dir, setup, logbase, found):
    """Runs the tests of @found one at a time into the log @logbase."""
    command = ["meson", "test", "-C", build_dir, "--num-processes", "1",
               "--print-errorlogs", "--logbase", logbase]
    if setup:
        command += ["--setup", setup]
    return subprocess.call(command + [n.split(" / ")[-1] for n, _ in found])


def replace_entries(path, newer):
    """The log at @path with each test of the log @newer in its place."""
    with open(newer, encoding="utf-8") as log:
        by_name = {json.loads(line)["name"]: line for line in log
                   if line.strip()}
    with open(path, encoding="utf-8") as log:
        lines = [line for line in log if line.strip()]
    with open(path, "w", encoding="utf-8") as log:
        for line in lines:
            name = json.loads(line)["name"]
            log.write(by_name.get(name, line).rstrip("\n") + "\n")


def main(build_dir, setup):
    logs = os.path.join(build_dir, "meson-logs")
    retry_log = os.path.join(logs, log_name(RETRY_BASE, setup))
    again_log = os.path.join(logs, log_name(AGAIN_BASE, setup))
    for path in (retry_log, again_log):
        if os.path.exists(path):
            os.remove(path)
    found = faults(os.path.join(logs, log_name("testlog", setup)))
    if not found:
        return 0
    print("== a fault of Open MPI's own, not of the test: running once more "
          + "; ".join(f"{name} ({reason})" for name, reason in found),
          flush=True)
    status = run_tests(build_dir, setup, RETRY_BASE, found)
    again = faults(retry_log) if os.path.exists(retry_log) else []
    if not again:
        return status
    print("== a fault of Open MPI's own again: running a third time "
          + "; ".join(f"{name} ({reason})" for name, reason in again),
          flush=True)
    status = run_tests(build_dir, setup, AGAIN_BASE, again)
    if os.path.exists(again_log):
        replace_entries(retry_log, again_log)
    return status


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--list":
        for name, reason in faults(sys.argv[2]):
            print(f"{name}\t{reason}")
        sys.exit(0)
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: ompi-retry.py BUILD_DIR [SETUP] | --list LOG")
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None))
