#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds and
# runs the whole test suite (ctest). Extra arguments go to ctest.
# Tests that read ../shared/data print SKIPPED with the reason when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset default ${PITSTOP_CMAKE_ARGS:-}
cmake --build --preset default -j "${PITSTOP_JOBS:-$(nproc)}"
ctest --preset default -j "${PITSTOP_TEST_JOBS:-2}" "$@"
