#!/usr/bin/env bash
# Style gate used by .ci/run:
#  - clang-format (Google base, .clang-format) on every tracked C++ file: fatal.
#  - no function in shipped code over 120 lines
#    (tools/check-function-size.py): fatal.
#  - no class in src/controller with more than 30 public methods
#    (tools/check-class-size.py): fatal.
#  - clang-tidy (.clang-tidy) on the C++ sources changed by the last commit
#    (or since BASE if given): findings are printed; errors are fatal.
# Usage: tools/check-style.sh [BASE_REV]
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cpp' | grep -v '^tests/data/')
# One clang-format for every file (one per file took 7x the CPU); it names
# each file it would change in its errors.
fmt_log=$(mktemp)
if ! clang-format --dry-run -Werror "${files[@]}" >/dev/null 2>"$fmt_log"; then
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' "$fmt_log" |
    sort -u | grep -Fx -f <(printf '%s\n' "${files[@]}") || true)
  echo "check-style: clang-format would change ${#bad[@]} file(s):"
  if ((${#bad[@]})); then
    printf '  %s\n' "${bad[@]}"
  else
    cat "$fmt_log"
  fi
  echo "fix with: clang-format -i <files>"
  rm -f "$fmt_log"
  exit 1
fi
rm -f "$fmt_log"
echo "check-style: clang-format clean on ${#files[@]} files"
/usr/bin/python3 tools/check-function-size.py
/usr/bin/python3 tools/check-class-size.py

base=${1:-HEAD~1}
if ! git rev-parse -q --verify "$base" >/dev/null; then
  echo "check-style: no base revision $base; skipping clang-tidy"
  exit 0
fi
if [[ ! -f build/compile_commands.json ]]; then
  echo "check-style: build/compile_commands.json missing; configure first" >&2
  exit 1
fi
mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" -- '*.cc' |
  grep -E '^(src|plugin|tools)/' || true)
if ((${#changed[@]} == 0)); then
  echo "check-style: no changed sources for clang-tidy"
  exit 0
fi
echo "check-style: clang-tidy on ${#changed[@]} changed file(s)"
# clang cannot read gcc's precompiled headers (cmake/pitstop_pch.cmake), so
# clang-tidy reads the compile commands without them: each file is then
# checked as it compiles alone, which also finds an include it forgot.
tidy_db=$(mktemp -d)
trap 'rm -rf "$tidy_db"' EXIT
/usr/bin/python3 tools/strip-pch-flags.py build/compile_commands.json \
  "$tidy_db/compile_commands.json"
# One run: its findings are printed, its exit status decides.
tidy_rc=0
clang-tidy -p "$tidy_db" --quiet "${changed[@]}" >"$tidy_db/tidy.log" 2>/dev/null ||
  tidy_rc=$?
grep -E 'warning:|error:' "$tidy_db/tidy.log" | head -100 || true
((tidy_rc == 0)) || { echo "check-style: clang-tidy reported errors"; exit 1; }
echo "check-style: done"
