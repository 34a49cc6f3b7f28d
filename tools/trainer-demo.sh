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
#
#   tools/trainer-demo.sh multi-lora [options of tools/lora_demo.py multi-lora]
#
# Trains 4 LoRA adapters on a frozen GPT-style base model cut into 4 pipeline
# stages over 4 gloo processes (pitstop.torch.MultiLoraTrainer), against the
# same daemons: healthy, one rank at half speed from step 15 (policy OFF), the
# same with pitstop's AUTO lora policy, and a reference run with the same
# placement change and no slowdown. The last line is
#   multi-lora: healthy=<samples/s> slowed=<samples/s> rescheduled=<samples/s> moved_at_step=<n> lost_steps=<n>
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
  multi-lora)
    shift
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    exec /usr/bin/python3 "$here/lora_demo.py" multi-lora "$@"
    ;;
  -h|--help|help)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    /usr/bin/python3 "$here/trainer_demo.py" local-sgd --help
    exec /usr/bin/python3 "$here/lora_demo.py" multi-lora --help
    ;;
  *)
    echo "usage: tools/trainer-demo.sh local-sgd|multi-lora [options]   (--help for options)" >&2
    exit 2
    ;;
esac
