#!/usr/bin/env python3
"""tools/strip-pch-flags.py: what clang-tidy is given (tools/check-style.sh).

The compile database of a build with precompiled headers names gcc's .gch
set (`-include .../cmake_pch.hxx`, `-Winvalid-pch`) and gcc-only warning
switches; clang-tidy stops on each. Both database forms ("command" strings
and "arguments" lists) lose exactly those and keep everything else.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("PITSTOP_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(SRC, "tools", "strip-pch-flags.py")

PCH = "/b/src/CMakeFiles/pitstop_pch_library.dir/cmake_pch.hxx"


def run(db_text, extra_args=None):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        with open(src, "w") as f:
            f.write(db_text)
        args = extra_args if extra_args is not None else [src, dst]
        p = subprocess.run([sys.executable, TOOL] + args,
                           capture_output=True, text=True)
        out = json.load(open(dst)) if p.returncode == 0 else None
        return p, out


class StripPchFlagsTest(unittest.TestCase):
    def test_command_form_loses_the_pch_flags_only(self):
        cmd = ("/usr/bin/c++ -DX=1 -I/b/src -Winvalid-pch -include " + PCH +
               " -Wno-stringop-overread -Wno-stringop-overflow"
               " -include config.h -Wno-stringop-overflow-ish -O2"
               " -o a.o -c /s/a.cc")
        p, out = run(json.dumps([{"directory": "/b", "file": "/s/a.cc",
                                  "command": cmd}]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(
            out[0]["command"],
            "/usr/bin/c++ -DX=1 -I/b/src -include config.h"
            " -Wno-stringop-overflow-ish -O2 -o a.o -c /s/a.cc")
        self.assertEqual(out[0]["file"], "/s/a.cc")

    def test_arguments_form_loses_the_pch_flags_only(self):
        args = ["c++", "-Winvalid-pch", "-include", PCH, "-include",
                "config.h", "-Wno-stringop-overread", "-Wall", "-c", "a.cc"]
        p, out = run(json.dumps([{"directory": "/b", "file": "a.cc",
                                  "arguments": args}]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out[0]["arguments"],
                         ["c++", "-include", "config.h", "-Wall", "-c",
                          "a.cc"])

    def test_a_flag_at_the_end_of_a_command_is_dropped(self):
        p, out = run(json.dumps([{"directory": "/b", "file": "a.cc",
                                  "command": "c++ -c a.cc -Winvalid-pch"}]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out[0]["command"], "c++ -c a.cc")

    def test_unreadable_database_names_the_file(self):
        p, out = run("[{not json")
        self.assertEqual(p.returncode, 1)
        self.assertIn("in.json", p.stderr)

    def test_wrong_arguments_print_usage(self):
        p, _ = run("[]", extra_args=["only-one"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("Usage:", p.stderr)


if __name__ == "__main__":
    unittest.main()
