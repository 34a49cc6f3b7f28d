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
# pitstop job id = Slurm job id (unique per array task too).
if [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "export PITSTOP_JOB_ID=$SLURM_JOB_ID"
fi
exit 0
