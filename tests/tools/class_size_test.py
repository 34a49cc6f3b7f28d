"""tools/check-class-size.py (issue #30): it names a class of the controller
with more public methods than the limit and fails; private and protected
members, constructors, destructors, deleted functions, friends, types and
data members do not count; a struct starts public; nested and qualified
classes are counted on their own; braces in comments and literals do not
fool it; and the shipped controller is within 30. Run by ctest with Debian's
python3."""

import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get(
    "PITSTOP_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CHECKER = os.path.join(SOURCE, "tools", "check-class-size.py")


def run(*args, cwd=None):
  return subprocess.run([sys.executable, CHECKER, *args], cwd=cwd,
                        capture_output=True, text=True, check=False)


def methods(n, prefix="M"):
  return "".join(f"  int {prefix}{i}(int x) const;\n" for i in range(n))


class ClassSizeTest(unittest.TestCase):

  def setUp(self):
    self.dir = tempfile.TemporaryDirectory()
    self.addCleanup(self.dir.cleanup)

  def write(self, text, name="a.h"):
    path = os.path.join(self.dir.name, name)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    return path

  def test_names_the_class_over_the_limit_and_fails(self):
    path = self.write("namespace n {\nclass Core {\n public:\n" + methods(31) +
                      "};\n}  // namespace n\n")
    r = run("--max-methods", "30", path)
    self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
    self.assertIn(f"{path}:2: Core has 31 public methods (limit 30)", r.stdout)

  def test_at_the_limit_passes(self):
    path = self.write("class Core {\n public:\n" + methods(30) + "};\n")
    r = run("--max-methods", "30", path)
    self.assertEqual(r.returncode, 0, r.stdout)
    self.assertIn("0 over 30 public methods (most: 30)", r.stdout)

  def test_only_public_methods_count(self):
    path = self.write(
        "class Core {\n"
        "  int Hidden();\n"  # a class starts private
        " public:\n"
        "  Core();\n  explicit Core(int x);\n  ~Core();\n"
        "  Core(const Core&) = delete;\n"
        "  Core& operator=(const Core&) = delete;\n"
        "  friend bool operator==(const Core&, const Core&);\n"
        "  using Callback = void (*)(int);\n"
        "  enum class Kind { kA, kB };\n"
        "  int data_member = 3;\n"
        "  void (*pointer_member)(int);\n"
        "  int A() const { if (x_) { return 1; } return 2; }\n"
        "  static Core* Create(int x);\n"
        "  bool operator<(const Core& o) const;\n"
        "  void Guarded() ABSL_LOCKS_EXCLUDED(mu_);\n"
        " protected:\n  int Protected();\n"
        " private:\n  int Private();\n  int x_ = 0;\n"
        "};\n")
    r = run("--max-methods", "3", "--top", "1", path)
    self.assertEqual(r.returncode, 1, r.stdout)
    # A, Create, operator<, Guarded.
    self.assertIn("Core has 4 public methods", r.stdout)

  def test_struct_starts_public_and_nested_classes_count_alone(self):
    path = self.write(
        "struct Outer {\n" + methods(2) +
        "  class Inner {\n   public:\n" + methods(3, "I") + "  };\n"
        "};\n"
        "class Outer::Later final : public Base {\n public:\n" +
        methods(4, "L") + "};\n")
    r = run("--max-methods", "30", "--top", "3", path)
    self.assertEqual(r.returncode, 0, r.stdout)
    self.assertIn("    2 Outer (", r.stdout)
    self.assertIn("    3 Inner (", r.stdout)
    self.assertIn("    4 Outer::Later (", r.stdout)

  def test_braces_in_comments_and_literals_do_not_fool_it(self):
    path = self.write(
        "class Core {\n public:\n"
        "  // } private: {\n"
        "  const char* Name() const { return \"} private: {\"; }\n"
        "  /* }; */ int Two();\n"
        "};\n")
    r = run("--max-methods", "1", path)
    self.assertEqual(r.returncode, 1, r.stdout)
    self.assertIn("Core has 2 public methods", r.stdout)

  def test_bad_arguments_exit_2(self):
    self.assertEqual(run("--max-methods", "0").returncode, 2)
    r = run(os.path.join(self.dir.name, "missing"))
    self.assertEqual(r.returncode, 2)
    self.assertIn("no such file or folder", r.stderr)

  def test_shipped_controller_is_within_30(self):
    r = run(cwd=SOURCE)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    # It saw the controller, not an empty folder.
    self.assertRegex(r.stdout, r"check-class-size: [1-9]\d+ classes")


if __name__ == "__main__":
  unittest.main()
