#!/bin/sh
# Slurm TaskProlog for pitstop: loads the in-process library into every
# task through NCCL's profiler plugin hook and names the job after the
# Slurm job, so pitstop's faults, policies and drains use Slurm job ids.
#
# slurm.conf (on every node):
#   TaskProlog=/usr/share/pitstop/slurm/pitstop-task-prolog.sh
#
# Slurm runs it as the job's user before each task and applies the
# "export NAME=VALUE" lines it prints to the task's environment.
# PITSTOP_PROFILER_LIB overrides where the library is looked for.
#
# When pitstop's tuner (libnccl-tuner-pitstop.so, the flow plan's channel
# and algorithm steering, docs/planning.md) is installed beside it, the task
# also gets NCCL_TUNER_PLUGIN, unless the user chose a tuner or opted out
# with PITSTOP_TUNER=0. PITSTOP_TUNER_LIB overrides where it is looked for.

lib=""
for candidate in "${PITSTOP_PROFILER_LIB:-}" \
    /usr/lib/x86_64-linux-gnu/libnccl-profiler-pitstop.so \
    /usr/lib/aarch64-linux-gnu/libnccl-profiler-pitstop.so \
    /usr/local/lib/x86_64-linux-gnu/libnccl-profiler-pitstop.so \
    /usr/lib/libnccl-profiler-pitstop.so; do
  if [ -n "$candidate" ] && [ -r "$candidate" ]; then
    lib=$candidate
    break
  fi
done

# A profiler the user chose wins; without the library NCCL runs as usual.
if [ -z "${NCCL_PROFILER_PLUGIN:-}" ] && [ -n "$lib" ]; then
  echo "export NCCL_PROFILER_PLUGIN=$lib"
fi
# The tuner: at PITSTOP_TUNER_LIB, else beside the profiler library.
tuner=""
beside=""
if [ -n "$lib" ]; then beside="${lib%/*}/libnccl-tuner-pitstop.so"; fi
for candidate in "${PITSTOP_TUNER_LIB:-}" "$beside"; do
  if [ -n "$candidate" ] && [ -r "$candidate" ]; then
    tuner=$candidate
    break
  fi
done
# A tuner the user chose wins; PITSTOP_TUNER=0 opts out.
if [ -z "${NCCL_TUNER_PLUGIN:-}" ] && [ "${PITSTOP_TUNER:-1}" != "0" ] &&
    [ -n "$tuner" ]; then
  echo "export NCCL_TUNER_PLUGIN=$tuner"
fi
# pitstop job id = Slurm job id (unique per array task too).
if [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "export PITSTOP_JOB_ID=$SLURM_JOB_ID"
fi
exit 0
