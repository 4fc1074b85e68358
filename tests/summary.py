#!/usr/bin/env python3
"""Sums meson's test results (testlog.json, one or more runs) into the
suite's closing line: 'N passed, N failed' (', N skipped' when any were
skipped).

Given several logs (the normal build and the sanitizer builds), it prints
one line per log first and the sum of them all last.  A sanitizer report
left in the 'sanitizers' folder beside a log (meson-logs/sanitizers, where
the asan and tsan test setups point log_path) counts as one more failure of
that run: it may come from a worker whose death the test expected.

A test that failed only by a fault of Open MPI's own (MPI_Comm_spawn never
returned, or its daemon crashed) was run once more by tests/ompi-retry.py
(a third time when that run met such a fault again); its last result, in
the retry log beside the log (testlog-ompi-retry[-SETUP].json), replaces
the first, and the line says how many were retried.

Above the counts it prints, per log, how long each suite's tests took and
its slowest tests, so that a run shows where its time went, the warnings
Open MPI printed in framed messages (the three most frequent), and then each
test that failed: its name, result, duration, the lines that say why
(the check runner's file:line:F: and :E: lines, which it prints on stdout
before the test's stderr, GLib's criticals, a sanitizer's first lines,
the processes a test found still running, GStreamer's ERROR log lines)
and the last lines it printed, and each sanitizer report's first lines.  They come last, just
above the closing line, so that a log cut to its tail still names them."""
import json
import os
import re
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}
REPORTS_DIR = "sanitizers"
RETRY_BASE = "testlog-ompi-retry"
TAIL_LINES = 25
KEY_LINES = 12
SLOWEST = 6
# A check's failure (file:line:F:case:test:0: message) or error (:E:), its
# closing count, a GLib critical or error, a sanitizer's first line, the
# processes a test found still running, a GStreamer ERROR log line.
KEY_LINE = re.compile(r"^\S+:\d+:[FE]:|^\d+%: Checks:|(CRITICAL|ERROR) \*\*"
                      r"|^==\d+==ERROR|^WARNING: ThreadSanitizer|^SUMMARY:"
                      r"|still running \d+ ms after|^  pid \d+ \(state"
                      r"|^\d+:\d+:\d+\.\d+ +\d+ +0x[0-9a-f]+ +ERROR ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_entries(path):
    """The test entries of a meson testlog.json, one JSON object a line."""
    with open(path, encoding="utf-8") as log:
        for line in log:
            if line.strip():
                yield json.loads(line)


def read_results(path):
    return {entry["name"]: entry["result"] for entry in read_entries(path)}


def read_failures(path):
    """The entries of the tests that failed, the retries' replacing the
    first runs'."""
    entries = {entry["name"]: entry for entry in read_entries(path)}
    if os.path.exists(retry_log(path)):
        entries.update({entry["name"]: entry
                        for entry in read_entries(retry_log(path))})
    return [entry for entry in entries.values()
            if entry["result"] not in PASSED | SKIPPED]


def print_failure(path, entry):
    print(f"{path}: FAILED {entry['name']}: {entry['result']} after "
          f"{entry.get('duration', 0.0):.1f} s (exit {entry.get('returncode')})")
    output = (entry.get("stdout") or "") + (entry.get("stderr") or "")
    lines = ANSI.sub("", output).rstrip().splitlines()
    key = [line for line in lines if KEY_LINE.search(line)][:KEY_LINES]
    for line in key:
        print(f"  ! {line}")
    for line in lines[-TAIL_LINES:]:
        print(f"  | {line}")


def retry_log(path):
    folder, name = os.path.split(path)
    setup = name[len("testlog"):-len(".json")]
    return os.path.join(folder, RETRY_BASE + setup + ".json")


def count_results(path):
    passed = failed = skipped = 0
    results = read_results(path)
    retried = {}
    if os.path.exists(retry_log(path)):
        retried = read_results(retry_log(path))
        results.update(retried)
    for name in sorted(retried):
        print(f"{path}: {name} ran again after a fault of Open MPI's own "
              f"(tests/ompi-retry.py says which): {retried[name]}")
    for result in results.values():
        if result in PASSED:
            passed += 1
        elif result in SKIPPED:
            skipped += 1
        else:
            failed += 1
    if passed + failed + skipped == 0:
        failed = 1  # a suite that ran nothing has failed
    return passed, failed, skipped


def suite_of(name):
    """'ppdiffuse:kernels+sanitizer-skip / kernels-x' -> 'kernels'."""
    head = name.split(" / ", 1)[0]
    return head.split(":", 1)[-1].split("+", 1)[0]


def suite_times(entries):
    times = {}
    for entry in entries:
        suite = suite_of(entry["name"])
        n, seconds = times.get(suite, (0, 0.0))
        times[suite] = (n + 1, seconds + entry.get("duration", 0.0))
    return times


def slowest_tests(entries):
    """The SLOWEST longest of a log's tests: (short name, seconds)."""
    entries = sorted(entries, key=lambda entry: -entry.get("duration", 0.0))
    return [(entry["name"].split(" / ", 1)[-1], entry.get("duration", 0.0))
            for entry in entries[:SLOWEST]]


def sanitizer_reports(path):
    folder = os.path.join(os.path.dirname(path), REPORTS_DIR)
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def print_report(report):
    """A sanitizer report's head: the error and the first frames."""
    print(f"sanitizer report: {report}")
    with open(report, encoding="utf-8", errors="replace") as text:
        for line in text.read().splitlines()[:TAIL_LINES]:
            print(f"  | {line}")


def open_mpi_warnings(entries):
    """Open MPI's framed warnings in the tests' output: {first line:
    [test names]}.  Open MPI's daemon crashed on such warnings, which
    ppdiffuse's processes now print themselves (mpi-helper/start/
    pp-ompi-help.h); which warnings a machine gives is still worth
    knowing."""
    found = {}
    for entry in entries:
        output = (entry.get("stdout") or "") + (entry.get("stderr") or "")
        inside = False
        first = None
        for line in output.splitlines():
            text = line.strip()
            if len(text) >= 10 and set(text) == {"-"}:
                if inside and first and first.upper().startswith("WARNING"):
                    found.setdefault(first[:150], []).append(
                        entry["name"].split(" / ", 1)[-1])
                inside, first = not inside, None
            elif inside and first is None and text:
                first = text
    return found


def format_line(passed, failed, skipped):
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    return line


def main(paths):
    totals = [0, 0, 0]
    failures = []
    for path in paths:
        if os.path.exists(path):
            entries = list(read_entries(path))
            times = suite_times(entries)
            for suite in sorted(times, key=lambda s: -times[s][1]):
                n, seconds = times[suite]
                print(f"{path}: suite {suite}: {n} tests, {seconds:.0f} s")
            print(f"{path}: slowest: " + ", ".join(
                f"{name} {seconds:.0f} s" for name, seconds
                in slowest_tests(entries)))
            warnings = open_mpi_warnings(entries)
            for text in sorted(warnings, key=lambda t: -len(warnings[t]))[:3]:
                tests = warnings[text]
                print(f"{path}: Open MPI warned in {len(tests)} tests "
                      f"(e.g. {tests[0]}): {text}")
        passed, failed, skipped = count_results(path)
        if os.path.exists(path):
            failures += [(path, entry) for entry in read_failures(path)]
        reports = sanitizer_reports(path)
        failed += len(reports)
        if len(paths) > 1:
            print(f"{path}: {format_line(passed, failed, skipped)}")
        failures += [(path, report) for report in reports]
        totals = [t + n for t, n in zip(totals, (passed, failed, skipped))]
    for path, failure in failures:
        if isinstance(failure, str):
            print_report(failure)
        else:
            print_failure(path, failure)
    print(format_line(*totals))
    return 1 if totals[1] else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: summary.py TESTLOG.json [TESTLOG.json ...]")
    sys.exit(main(sys.argv[1:]))
