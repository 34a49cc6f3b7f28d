#!/usr/bin/env python3
"""Writes a copy of a compile database without precompiled-header flags.

Usage: tools/strip-pch-flags.py IN_compile_commands.json OUT_compile_commands.json

CMake compiles every library and test with gcc's precompiled headers
(cmake/pitstop_pch.cmake: `-Winvalid-pch -include .../cmake_pch.hxx`).
clang-based tools cannot read gcc's .gch files and stop with "not a valid
precompiled PCH file"; without the flags they parse each file as it
compiles alone. It also drops the gcc-only warning switches the
precompiled headers' users get (-Wno-stringop-overread/-overflow, see
cmake/pitstop_pch.cmake): clang calls them unknown, an error under -Werror,
and clang-tidy then fails every file. Used by tools/check-style.sh.
"""
import json
import re
import sys

# The switches dropped alone: the warning that comes with the precompiled
# headers and the gcc-only ones their users get.
_GCC_ONLY = ("-Winvalid-pch", "-Wno-stringop-overread", "-Wno-stringop-overflow")
# In a "command" string: those, and "-include <dir>/cmake_pch.hxx" (nothing
# else in a command names a cmake_pch file).
_PCH = re.compile(
    r"\s+-include\s+\S*cmake_pch\.hxx\b|"
    + "|".join(r"\s+" + re.escape(f) + r"(?=\s|$)" for f in _GCC_ONLY))


def strip(entry):
    entry = dict(entry)
    if "command" in entry:
        entry["command"] = _PCH.sub("", entry["command"])
    if "arguments" in entry:
        args, out, skip = entry["arguments"], [], False
        for i, a in enumerate(args):
            if skip:
                skip = False
                continue
            if a in _GCC_ONLY:
                continue
            if a == "-include" and i + 1 < len(args) and "cmake_pch.hxx" in args[i + 1]:
                skip = True
                continue
            out.append(a)
        entry["arguments"] = out
    return entry


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"strip-pch-flags: cannot read {argv[1]}: {e}\n")
        return 1
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump([strip(e) for e in db], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
