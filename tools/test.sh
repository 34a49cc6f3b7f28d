#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds and
# runs the whole test suite (ctest). Extra arguments go to ctest.
# Tests that read ../shared/data print SKIPPED with the reason when it is absent;
# the end of the output counts the skipped tests and gives each one's reason.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset default ${PITSTOP_CMAKE_ARGS:-}
cmake --build --preset default -j "${PITSTOP_JOBS:-$(nproc)}"
rc=0
# The JUnit file records which tests were skipped and what they printed.
junit="$PWD/build/Testing/ctest-junit.xml"
ctest --preset default -j "${PITSTOP_TEST_JOBS:-2}" --output-junit "$junit" \
  "$@" || rc=$?
# ctest shows only "Skipped"; print how many were skipped and why.
/usr/bin/python3 tools/skipped-tests.py "$junit" || true
exit $rc
