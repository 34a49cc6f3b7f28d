#!/usr/bin/python3
"""Lists the tests a ctest run skipped, with their reasons, from its JUnit
file (ctest --output-junit FILE). ctest marks a test skipped on gtest's
"[  SKIPPED ]" (gtest_discover_tests sets SKIP_REGULAR_EXPRESSION) and on
SKIP_RETURN_CODE 77 (deploy and etcd tests). A pytest or unittest run (one
ctest test, several Python tests) that skipped some of its tests is listed
too, with the reasons it printed (pytest -rs); ctest counts it as run.

Usage: tools/skipped-tests.py JUNIT [--must-run] [--allow REGEX REASON]...

Prints the number of skipped tests and each one's reason. With --must-run
(.ci/run) every skipped test must match an --allow pattern (a Python
regular expression over the ctest name, e.g. "Suite.Test"); any other skip
fails (exit 1), since a skipped test checks nothing.
"""
import re
import sys
import xml.etree.ElementTree as ET


def reason_of(output):
    """The reason a test printed for its skip."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    # gtest: "file:line: Skipped" then the GTEST_SKIP() message.
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1]
    # pytest -rs ("SKIPPED [1] file:line: why"), the deploy tests.
    for line in lines:
        if line.startswith("SKIPPED"):
            return line
    for line in reversed(lines):
        if "SKIP" in line.upper():
            return line
    return lines[-1] if lines else "(no output)"


# The summary line of a Python run that skipped some tests: pytest's "3
# passed, 1 skipped in 0.52s" (with -q; "failed" and "passed" counts come
# first), unittest's "OK (skipped=1)" or "FAILED (failures=1, skipped=1)".
PYTHON_SKIPS = re.compile(
    r"^=*\s*([0-9]+ [a-z]+, )*[0-9]+ skipped\b|^(OK|FAILED) \(.*skipped=[0-9]+",
    re.M)


def python_skips(output):
    """The reasons of the tests a pytest/unittest run skipped ([] if none)."""
    if not PYTHON_SKIPS.search(output):
        return []
    # pytest -rs: "SKIPPED [1] file:line: why"; unittest -v: "... skipped 'why'"
    reasons = [line.strip() for line in output.splitlines()
               if line.startswith("SKIPPED [") or " skipped '" in line]
    return reasons or ["Python tests skipped (no reason printed)"]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    junit, must_run, allowed = argv[1], False, []
    args = argv[2:]
    while args:
        if args[0] == "--must-run":
            must_run, args = True, args[1:]
        elif args[0] == "--allow" and len(args) >= 3:
            allowed.append((re.compile(args[1]), args[2]))
            args = args[3:]
        else:
            print(f"skipped-tests: bad argument {args[0]!r}", file=sys.stderr)
            return 2
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"skipped-tests: cannot read {junit}: {e}", file=sys.stderr)
        return 2
    skipped = []
    for case in root.iter("testcase"):
        out = case.find("system-out")
        text = out.text if out is not None and out.text else ""
        if case.find("skipped") is not None:
            skipped.append((case.get("name"), reason_of(text)))
        else:
            skipped += [(case.get("name"), why) for why in python_skips(text)]
    total = len(list(root.iter("testcase")))
    print(f"{len(skipped)} of {total} tests skipped" +
          (":" if skipped else ""))
    refused = []
    for name, reason in skipped:
        allow = next((why for pattern, why in allowed
                      if pattern.fullmatch(name)), None)
        print(f"  {name}: {reason}")
        if must_run:
            if allow is None:
                refused.append(name)
            else:
                print(f"    allowed on CI: {allow}")
    if refused:
        print(f"{len(refused)} skipped test(s) must run on the CI machine "
              "(.ci/run lists the skips it allows):")
        for name in refused:
            print(f"  {name}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
