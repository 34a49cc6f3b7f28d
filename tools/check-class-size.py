#!/usr/bin/python3
"""Fails when a class in the controller has more public methods than a limit.

Usage: tools/check-class-size.py [--max-methods N] [--top K] [PATH...]

PATHs are files or folders (default: src/controller). Issue #30 asks that
no class of the controller grows back into a core that every change has to
read: a class with more than N public member functions (default 30) is
listed as FILE:LINE: NAME has M public methods. Exit status: 0 when every
class is within the limit, 1 when one is not, 2 on bad arguments.

What counts: every member function declared or defined in a public section
(a struct starts public, a class private), static or not, operators
included. Constructors, destructors, deleted and defaulted functions do not
count (they add no behaviour a caller must learn), nor do friends, types,
data members or the members of nested classes (each nested class is
counted on its own). Overloads of one name count once each: a reader reads
each. Comments, literals and preprocessor lines are stripped by
check-function-size.py's stripper, so braces in them do not fool the
parser.
"""

import argparse
import importlib.util
import os
import re
import sys

DEFAULT_ROOTS = ["src/controller"]
EXTENSIONS = (".h", ".hpp", ".cc")
CLASS_HEAD = re.compile(
    r"(?:^|[;{}]\s*|template\s*<[^;{}]*>\s*)\b(class|struct)\s+"
    r"(?:ABSL_\w+(?:\([^()]*\))?\s+|\[\[[^\]]*\]\]\s*)*(\w+(?:::\w+)*)"
    r"[^;{}()]*\{")
ACCESS = re.compile(r"\b(public|private|protected)\s*:(?!:)")
NOT_METHOD = re.compile(
    r"^\s*(friend|using|typedef|static_assert|enum|class|struct|union)\b")


def load_stripper():
  here = os.path.dirname(os.path.abspath(__file__))
  spec = importlib.util.spec_from_file_location(
      "check_function_size", os.path.join(here, "check-function-size.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.strip_code


def matching_brace(text, open_pos):
  """Index of the brace closing the one at open_pos (or len(text))."""
  depth = 0
  for k in range(open_pos, len(text)):
    if text[k] == "{":
      depth += 1
    elif text[k] == "}":
      depth -= 1
      if depth == 0:
        return k
  return len(text)


def members(body):
  """Splits a class body into (offset, text, has_body) member statements at
  its own depth; nested braces (inline bodies, nested classes, brace
  initializers) stay inside their member."""
  out = []
  start = 0
  k = 0
  while k < len(body):
    c = body[k]
    if c == "{":
      end = matching_brace(body, k)
      head = body[start:k]
      if "(" in head and not re.search(r"=\s*$", head):
        # An inline function body ends the member (no ';' after it).
        out.append((start, head, True))
        start = end + 1
      k = end + 1
      continue
    if c == ";":
      out.append((start, body[start:k], False))
      start = k + 1
    elif c == ":" and ACCESS.search(body[start:k + 1]):
      m = ACCESS.search(body[start:k + 1])
      out.append((start + m.start(), m.group(1) + ":", False))
      start = k + 1
    k += 1
  return out


def method_name(statement, class_name):
  """The name a public member function declares, or None."""
  s = " ".join(statement.split())
  if not s or NOT_METHOD.match(s) or "(" not in s:
    return None
  if re.search(r"=\s*(delete|default)\s*$", s):
    return None
  # The name is the identifier (or operator) before the first '(' that is
  # not inside a template argument list.
  depth = 0
  for k, ch in enumerate(s):
    if ch == "<":
      depth += 1
    elif ch == ">":
      depth = max(0, depth - 1)
    elif ch == "(" and depth == 0:
      head = s[:k].rstrip()
      break
  else:
    return None
  m = re.search(r"(operator\s*\S+|~?\w+)$", head)
  if not m:
    return None  # e.g. a data member of function-pointer type
  name = m.group(1)
  if name in (class_name, "~" + class_name) or name.startswith("ABSL_"):
    return None
  if re.match(r"^(decltype|alignas|sizeof)$", name):
    return None
  return name


def classes(text):
  """Yields (offset, name, public method names) for every class in text,
  nested ones included."""
  for m in CLASS_HEAD.finditer(text):
    kind, name = m.group(1), m.group(2)
    open_pos = m.end() - 1
    body = text[open_pos + 1:matching_brace(text, open_pos)]
    access = "public" if kind == "struct" else "private"
    names = []
    for _, statement, _ in members(body):
      if statement.endswith(":") and statement[:-1] in (
          "public", "private", "protected"):
        access = statement[:-1]
        continue
      if access != "public":
        continue
      method = method_name(statement, name.split("::")[-1])
      if method:
        names.append(method)
    yield m.start(2), name, names


def paths_under(roots):
  for root in roots:
    if os.path.isfile(root):
      yield root
      continue
    for folder, _, files in os.walk(root):
      for f in sorted(files):
        if f.endswith(EXTENSIONS):
          yield os.path.join(folder, f)


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--max-methods", type=int, default=30)
  parser.add_argument("--top", type=int, default=0,
                      help="also list the K classes with most methods")
  parser.add_argument("paths", nargs="*")
  args = parser.parse_args(argv)
  if args.max_methods < 1:
    parser.error("--max-methods must be at least 1")
  roots = args.paths or DEFAULT_ROOTS
  for r in roots:
    if not os.path.exists(r):
      parser.error(f"no such file or folder: {r}")
  strip = load_stripper()
  found = []
  for path in paths_under(roots):
    with open(path, encoding="utf-8", errors="replace") as f:
      text = strip(f.read())
    for offset, name, names in classes(text):
      line = text.count("\n", 0, offset) + 1
      found.append((len(names), path, line, name))
  over = [c for c in found if c[0] > args.max_methods]
  for count, path, line, name in sorted(over, reverse=True):
    print(f"{path}:{line}: {name} has {count} public methods "
          f"(limit {args.max_methods})")
  for count, path, line, name in sorted(found, reverse=True)[:args.top]:
    print(f"  {count:3d} {name} ({path}:{line})")
  most = max(found)[0] if found else 0
  print(f"check-class-size: {len(found)} classes, "
        f"{len(over)} over {args.max_methods} public methods "
        f"(most: {most})")
  return 1 if over else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
