#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds and
# runs the whole test suite (ctest). Extra arguments go to ctest.
# Tests that read ../shared/data print SKIPPED with the reason when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset default ${PITSTOP_CMAKE_ARGS:-}
cmake --build --preset default -j "${PITSTOP_JOBS:-$(nproc)}"
rc=0
ctest --preset default -j "${PITSTOP_TEST_JOBS:-2}" "$@" || rc=$?
# ctest shows only "Skipped"; print each skipped test with its reason too.
log=build/Testing/Temporary/LastTest.log
if [[ -f $log ]] && grep -q ": Skipped$" "$log"; then
  echo "Skipped tests and why:"
  awk '/^[0-9]+\/[0-9]+ Testing: / { test = $3 }
       /: Skipped$/ { getline reason; print "  " test ": " reason }' "$log"
fi
exit $rc
