#!/usr/bin/env python3
"""Sums meson's test results (testlog.json) into the suite's closing line:
'N passed, N failed' (', N skipped' when any were skipped)."""
import json
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}


def main(path):
    passed = failed = skipped = 0
    with open(path, encoding="utf-8") as log:
        for line in log:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            if result in PASSED:
                passed += 1
            elif result in SKIPPED:
                skipped += 1
            else:
                failed += 1
    if passed + failed + skipped == 0:
        failed = 1  # a suite that ran nothing has failed
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
