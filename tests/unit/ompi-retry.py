#!/usr/bin/env python3
"""tests/ompi-retry.py picks the failed tests to run again, and only those:
a spawn that never returned, Open MPI's daemon crashing in its own code
(as a CI run printed it, on lines of its own and quoted in one line by the
element's error); never a test that passed, failed otherwise, crashed in a
ppdiffuse process, or makes the fault on purpose; and runs a third time a
test whose second run met the fault again."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RETRY = os.path.join(HERE, "..", "ompi-retry.py")

# Open MPI's daemon, as its handler printed it (the libraries' paths of
# Debian 12).
DAEMON_FRAMES = [
    "/lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7ffb70acf050]",
    "/lib/x86_64-linux-gnu/libc.so.6(+0x16d809)[0x7ffb70c00809]",
    "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_rml_oob.so"
    "(orte_rml_oob_send_buffer_nb+0x375)[0x7ffb6e0cf425]",
    "/lib/x86_64-linux-gnu/libopen-rte.so.40(pmix_server_log_fn+0x317)"
    "[0x7ffb70ccdeb7]",
    "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pmix_ext3x.so"
    "(+0x1442c)[0x7ffb6e1a542c]",
    "/lib/x86_64-linux-gnu/libpmix.so.2(pmix_server_log+0x387)"
    "[0x7ffb6da98e17]",
    "/lib/x86_64-linux-gnu/libevent_core-2.1.so.7(event_base_loop+0x49f)"
    "[0x7ffb7094542f]",
    "/lib/x86_64-linux-gnu/libc.so.6(+0x1098ec)[0x7ffb70b9c8ec]",
]
# Its main thread, killed by a signal (the executable's frame last).
DAEMON_MAIN_FRAMES = [
    "/lib/x86_64-linux-gnu/libc.so.6(poll+0x4f)[0x7f093095526f]",
    "/lib/x86_64-linux-gnu/libevent_core-2.1.so.7(event_base_loop+0x295)"
    "[0x7f093070b225]",
    "/lib/x86_64-linux-gnu/libopen-rte.so.40(orte_daemon+0x1516)"
    "[0x7f0930a74e66]",
    "/lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0x85)[0x7f0930880305]",
    "orted(+0x1161)[0x564c743ab161]",
]
# A worker that crashed in ppdiffuse's code: a fault to report, not retry.
WORKER_FRAMES = [
    "/lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f1]",
    "/work/build/mpi-helper/ppdiffuse-worker(+0x2f3a1)[0x55e2]",
    "/lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0x85)[0x7f2]",
]


def backtrace(pid, frames, sep):
    lines = [f"[vm:{pid}] *** Process received signal ***",
             f"[vm:{pid}] Signal: Segmentation fault (11)"]
    lines += [f"[vm:{pid}] [{n:2d}] {f}" for n, f in enumerate(frames)]
    lines.append(f"[vm:{pid}] *** End of error message ***")
    return sep.join(lines) + sep


def entry(name, result, stderr, stdout=""):
    return {"name": f"ppdiffuse:faults / {name}", "result": result,
            "stdout": stdout, "stderr": stderr}


SPAWN_HANG_TEXT = ("Cannot start the ppdiffuse worker mesh: spawning them "
                   "(MPI_Comm_spawn) did not finish within 60000 ms")


def check_third_run():
    """A test whose second run met the fault again runs a third time, and
    only it; its third result takes the second's place in the retry log,
    the other retried test's result staying."""
    spec = importlib.util.spec_from_file_location("ompi_retry", RETRY)
    retry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(retry)
    runs = []

    def write(path, entries):
        with open(path, "w", encoding="utf-8") as out:
            for e in entries:
                out.write(json.dumps(e) + "\n")

    def fake_run(build_dir, setup, logbase, found):
        runs.append((logbase, sorted(name for name, _ in found)))
        path = os.path.join(build_dir, "meson-logs",
                            retry.log_name(logbase, setup))
        if logbase == retry.RETRY_BASE:
            write(path, [entry("stop", "FAIL", SPAWN_HANG_TEXT),
                         entry("other", "FAIL", "a real failure")])
        else:
            write(path, [entry("stop", "OK", "")])
        return 0

    retry.run_tests = fake_run
    with tempfile.TemporaryDirectory() as work:
        logs = os.path.join(work, "meson-logs")
        os.makedirs(logs)
        write(os.path.join(logs, "testlog.json"),
              [entry("stop", "FAIL", SPAWN_HANG_TEXT),
               entry("other", "FAIL", SPAWN_HANG_TEXT),
               entry("fine", "OK", "")])
        retry.main(work, None)
        with open(os.path.join(logs, "testlog-ompi-retry.json"),
                  encoding="utf-8") as log:
            results = {json.loads(line)["name"]: json.loads(line)["result"]
                       for line in log if line.strip()}
    want_runs = [
        ("testlog-ompi-retry", ["ppdiffuse:faults / other",
                                "ppdiffuse:faults / stop"]),
        ("testlog-ompi-retry-again", ["ppdiffuse:faults / stop"]),
    ]
    want_results = {"ppdiffuse:faults / stop": "OK",
                    "ppdiffuse:faults / other": "FAIL"}
    if runs != want_runs or results != want_results:
        sys.exit(f"the third run: runs {runs}, wanted {want_runs}; retry "
                 f"log {results}, wanted {want_results}")
    print("a second fault ran the test a third time, its result kept")


def main():
    error = ("gstppdiffuse.c:798: error: Cannot start the ppdiffuse worker "
             "mesh: … worker rank 1 (pid 6611 on vm) exited before it "
             "joined the mesh. Open MPI says: ")
    spawn = ("could not start 2 workers …: spawning them (MPI_Comm_spawn) "
             "did not finish within 10000 ms\n")
    entries = [
        entry("daemon-lines", "FAIL", backtrace(6576, DAEMON_FRAMES, "\n")),
        entry("daemon-quoted", "FAIL",
              error + backtrace(6577, DAEMON_FRAMES, " ")),
        entry("daemon-main", "FAIL", backtrace(6583, DAEMON_MAIN_FRAMES, "\n")),
        entry("spawn-hang", "FAIL", spawn),
        entry("passed-with-crash", "OK", backtrace(6578, DAEMON_FRAMES, "\n")),
        entry("worker-crash", "FAIL", backtrace(6579, WORKER_FRAMES, "\n")),
        # The daemon's frames and a worker's of another pid: Open MPI's.
        entry("both", "FAIL", backtrace(6580, WORKER_FRAMES, "\n")
              + backtrace(6581, DAEMON_FRAMES, "\n")),
        # Frames without the signal's line: not a crash report.
        entry("frames-only", "FAIL",
              "\n".join(f"[vm:6582] [ {n}] {f}"
                        for n, f in enumerate(DAEMON_FRAMES))),
        entry("other-failure", "FAIL", "break-it.c:391:F: never streamed\n"),
        entry("start-failures-late-workers", "FAIL", spawn),
        entry("start-failures-daemon-crash", "FAIL",
              backtrace(6584, DAEMON_MAIN_FRAMES, "\n")),
        entry("timeout", "TIMEOUT", spawn),
    ]
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "testlog.json")
        with open(log, "w", encoding="utf-8") as out:
            for e in entries:
                out.write(json.dumps(e) + "\n")
        listed = subprocess.run([sys.executable, RETRY, "--list", log],
                                check=True, capture_output=True,
                                text=True).stdout
    got = dict(line.split("\t") for line in listed.splitlines())
    want = {
        "ppdiffuse:faults / daemon-lines":
            "Open MPI's daemon crashed (pid vm:6576)",
        "ppdiffuse:faults / daemon-quoted":
            "Open MPI's daemon crashed (pid vm:6577)",
        "ppdiffuse:faults / daemon-main":
            "Open MPI's daemon crashed (pid vm:6583)",
        "ppdiffuse:faults / spawn-hang": "MPI_Comm_spawn never returned",
        "ppdiffuse:faults / both": "Open MPI's daemon crashed (pid vm:6581)",
        "ppdiffuse:faults / timeout": "MPI_Comm_spawn never returned",
    }
    if got != want:
        sys.exit(f"ompi-retry.py --list gave\n{json.dumps(got, indent=1)}\n"
                 f"wanted\n{json.dumps(want, indent=1)}")
    print(f"{len(want)} of {len(entries)} failures picked, as wanted")
    check_third_run()


if __name__ == "__main__":
    main()
