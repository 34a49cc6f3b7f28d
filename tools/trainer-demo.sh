#!/usr/bin/env bash
# The trainer demos (docs/policies.md).
#
#   tools/trainer-demo.sh local-sgd [options of tools/trainer_demo.py local-sgd]
#
# Trains a small GPT-style character-level model on /usr/share/common-licenses
# with 4 gloo processes through pitstop.torch.EDiT, against a real
# pitstop-controller and pitstop-agent on loopback: healthy, then one rank at
# half speed synchronous (slow-sync) and the same with pitstop's AUTO policy
# (slow-auto), twice each in ABBA order; wall-clock settings are calibrated
# in steps on the machine, evaluation happens after each run. The last line
# is
#   local-sgd: sync_s=<s> switched_s=<s> speedup=<x> switch_step=<n> healthy_switches=<n>
# Needs the build (cmake --preset default && cmake --build --preset default)
# and Debian's python3-torch, python3-grpcio (tools/install-deps.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  local-sgd)
    shift
    # One BLAS / OpenMP thread per rank: 4 ranks share the machine's cores.
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    exec /usr/bin/python3 "$here/trainer_demo.py" local-sgd "$@"
    ;;
  -h|--help|help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exec /usr/bin/python3 "$here/trainer_demo.py" local-sgd --help
    ;;
  *)
    echo "usage: tools/trainer-demo.sh local-sgd [options]   (--help for options)" >&2
    exit 2
    ;;
esac
