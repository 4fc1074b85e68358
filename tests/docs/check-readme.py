#!/usr/bin/env python3
"""README.md against the tree it describes.

  check-readme.py SOURCE_ROOT PPDIFFUSE_TOOL [GI_PYTHON]

- The sample output of `ppdiffuse-tool test-ops --backend cpu-strict` gives
  the ops and cases that the tool runs today.
- Every script in pipelines/ has a row in the README's table of pipelines,
  and every row names a script that exists.
- What the table says pipelines/live-control.py takes, it takes
  (--prompt, --prompt-embeds in its --help, run by GI_PYTHON: a python3
  with PyGObject; without one that check is left out, and says so).

Prints each mismatch and exits 1 when there is one.
"""

import re
import subprocess
import sys
from pathlib import Path

TEST_OPS_LINE = re.compile(r"test-ops on cpu-strict \(.*\): (\d+) ops, "
                           r"(\d+) cases, (\d+) passed, (\d+) failed")
TABLE_ROW = re.compile(r"^\| `(pipelines/[^` ]+)")
LIVE_CONTROL_OPTIONS = ("--prompt", "--prompt-embeds")
TOOL_TIMEOUT_S = 120


def check_test_ops(readme, tool):
    documented = TEST_OPS_LINE.search(readme)
    if documented is None:
        return ["README.md: no sample line of test-ops on cpu-strict"]
    run = subprocess.run([tool, "test-ops", "--backend", "cpu-strict"],
                         capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT_S, check=False)
    actual = TEST_OPS_LINE.search(run.stdout)
    if actual is None:
        return [f"{tool} test-ops printed no summary line "
                f"(exit {run.returncode})"]
    if documented.group(1, 2, 3, 4) != actual.group(1, 2, 3, 4):
        return [f"README.md says '{documented.group(0)}', the tool says "
                f"'{actual.group(0)}'"]
    return []


def check_pipelines(readme, root):
    rows = set()
    for line in readme.splitlines():
        m = TABLE_ROW.match(line)
        if m:
            rows.add(m.group(1))
    scripts = {f"pipelines/{p.name}" for p in (root / "pipelines").iterdir()
               if p.suffix in (".sh", ".py")}
    errors = [f"README.md: {s} has no row in the table of pipelines"
              for s in sorted(scripts - rows)]
    errors += [f"README.md: the table names {r}, which does not exist"
               for r in sorted(rows - scripts)]
    return errors


def check_live_control(root, python):
    script = root / "pipelines" / "live-control.py"
    run = subprocess.run([python, str(script), "--help"],
                         capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT_S, check=False)
    return [f"{script.name} --help does not offer {o}"
            for o in LIVE_CONTROL_OPTIONS if o not in run.stdout]


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    root, tool = Path(argv[0]), argv[1]
    readme = (root / "README.md").read_text()
    errors = check_test_ops(readme, tool) + check_pipelines(readme, root)
    if len(argv) == 3:
        errors += check_live_control(root, argv[2])
    else:
        print("no python3 with PyGObject: live-control.py's options not "
              "checked")
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
