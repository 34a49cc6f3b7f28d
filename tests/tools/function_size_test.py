"""tools/check-function-size.py (issue #30): it names a function over the
limit and fails, counts a function from its signature's first line to its
closing brace (lambdas and local classes inside it included), does not take
control statements, lambdas at namespace scope, classes or namespaces for
functions, is not fooled by braces in comments and literals, and passes on
the shipped tree. Run by ctest with Debian's python3."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SOURCE = os.environ.get(
    "PITSTOP_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CHECKER = os.path.join(SOURCE, "tools", "check-function-size.py")


def run(*args, cwd=None):
  return subprocess.run([sys.executable, CHECKER, *args], cwd=cwd,
                        capture_output=True, text=True, check=False)


def body(n):
  """n statement lines."""
  return "".join(f"  x += {i};\n" for i in range(n))


class FunctionSizeTest(unittest.TestCase):

  def setUp(self):
    self.dir = tempfile.TemporaryDirectory()
    self.addCleanup(self.dir.cleanup)

  def write(self, name, text):
    path = os.path.join(self.dir.name, name)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    return path

  def test_long_function_is_named_and_fails(self):
    # Signature (2 lines) + 126 statements + closing brace = 129 lines.
    path = self.write(
        "long.cc", "namespace n {\n\nint Long(int a,\n         int b) {\n"
        "  int x = 0;\n" + body(124) + "  return x;\n}\n\n}  // namespace n\n")
    r = run(path)
    self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
    self.assertIn(f"{path}:3: Long has 129 lines (limit 120)", r.stdout)
    self.assertIn("1 function(s) over 120 lines", r.stdout)

  def test_function_at_the_limit_passes_and_lower_limit_fails(self):
    path = self.write("ok.cc",
                      "int Ok() {\n  int x = 0;\n" + body(116) + "  return x;\n}\n")
    r = run(path)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    self.assertIn("1 functions in 1 files, none over 120 lines", r.stdout)
    r = run("--max-lines", "119", path)
    self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
    self.assertIn("Ok has 120 lines (limit 119)", r.stdout)

  def test_lambdas_and_local_classes_count_in_their_function(self):
    text = ("void Outer() {\n"
            "  auto f = [](int x) {\n" + body(60) + "    return x;\n  };\n"
            "  struct Local { int G() { return 1; } };\n" + body(60) + "}\n")
    path = self.write("outer.cc", text)
    r = run("--top", "5", path)
    self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
    self.assertIn(f"{path}:1: Outer has 126 lines", r.stdout)
    # One function only: the lambda and G are part of Outer.
    self.assertIn("1 function(s) over", r.stdout)
    self.assertNotIn(": G (", r.stdout)

  def test_members_constructors_and_qualifiers(self):
    text = textwrap.dedent("""\
        class C {
         public:
          C(int a) : a_(a), b_{a} {
        """) + body(130) + textwrap.dedent("""\
          }
          int Get() const noexcept ABSL_LOCKS_EXCLUDED(mu_) {
        """) + body(130) + textwrap.dedent("""\
          }
          auto Trailing() -> int {
        """) + body(130) + "  }\n};\n"
    path = self.write("members.h", text)
    r = run(path)
    self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
    for name in ("C", "Get", "Trailing"):
      self.assertIn(f": {name} has 132 lines", r.stdout)
    self.assertIn("3 function(s) over", r.stdout)

  def test_braces_in_comments_literals_and_macros_are_ignored(self):
    text = ('// void Fake() {\n'
            '#define OPEN {\n'
            'const char* s = "int g() {";\n'
            'char c = \'{\';\n'
            'const char* raw = R"x(void h() { )x";\n'
            '/* int i() {\n*/\n'
            'int f() {\n  return 1\'000;\n}\n')
    path = self.write("tricky.cc", text)
    r = run("--top", "10", path)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    self.assertIn(f"{path}:8: f (3 lines)", r.stdout)
    self.assertIn("1 functions in 1 files", r.stdout)

  def test_control_statements_and_scopes_are_not_functions(self):
    text = ("namespace a {\nstruct S {\n  int v;\n};\nenum class E { kA };\n"
            "int F(int n) {\n  if (n) {\n    for (int i = 0; i < n; ++i) {\n"
            "      while (n) {\n        --n;\n      }\n    }\n  }\n"
            "  switch (n) {\n    default: {\n      break;\n    }\n  }\n"
            "  return n;\n}\n}  // namespace a\n")
    path = self.write("control.cc", text)
    r = run("--top", "10", path)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    self.assertIn(f"{path}:6: F (15 lines)", r.stdout)
    self.assertIn("1 functions in 1 files", r.stdout)

  def test_bad_arguments(self):
    r = run("--max-lines", "0")
    self.assertEqual(r.returncode, 2)
    self.assertIn("--max-lines: 0 is not a positive number", r.stderr)
    missing = os.path.join(self.dir.name, "nope")
    r = run(missing)
    self.assertEqual(r.returncode, 2)
    self.assertIn(f"{missing}: no such file or folder", r.stderr)

  def test_shipped_code_is_within_the_limit(self):
    r = run(cwd=SOURCE)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    self.assertIn("none over 120 lines", r.stdout)


if __name__ == "__main__":
  unittest.main()
