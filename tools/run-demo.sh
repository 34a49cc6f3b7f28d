#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the
# default demo end to end. Extra arguments are passed to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset default ${PITSTOP_CMAKE_ARGS:-} >/dev/null
cmake --build --preset default -j "${PITSTOP_JOBS:-$(nproc)}"
if [[ -x build/tools/pitstop/pitstop ]]; then
  exec build/tools/pitstop/pitstop sim "$@"
fi
echo "run-demo: the pitstop tool is not built yet; running the foundation smoke test"
exec ctest --preset default -R 'ProtoRoundTrip|Config'
