#!/usr/bin/python3
"""Fails when a function in shipped C++ code is longer than a limit.

Usage: tools/check-function-size.py [--max-lines N] [--top K] [PATH...]

PATHs are files or folders (default: the shipped code, src/ plugin/ tuner/
tools/ include/). A function's length is counted from the first line of its
signature to its closing brace, blank and comment lines included (what a
reader scrolls through). Lambdas and local classes count in the function
that holds them. Exit status: 0 when every function is within the limit, 1
when one is not (each is listed as FILE:LINE: NAME has N lines), 2 on bad
arguments.

The parser is deliberately small: it strips comments, string and character
literals and preprocessor lines, tracks braces, and calls a brace a
function's body when the text before it (since the last ';', '{' or '}')
ends in a parameter list, optionally followed by qualifiers, a trailing
return type or a constructor's initializer list, and it is not a control
statement (a constructor's brace-initialized members are part of its
head). It runs over the whole tree in about a second, so CI runs it on
every file, not only the changed ones.
"""

import argparse
import os
import re
import sys

DEFAULT_ROOTS = ["src", "plugin", "tuner", "tools", "include"]
EXTENSIONS = (".cc", ".h", ".cpp", ".hpp")
CONTROL = re.compile(
    r"^(if|for|while|switch|catch|do|else|return|case|default)\b")
# Heads that open a scope which is not a function body.
SCOPE = re.compile(
    r"^(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b")
# A member's brace initializer in a constructor's initializer list
# ("X::X(a) : b_(a), c_{"): part of the head, not a scope.
# "public:" before a member function's head.
ACCESS = re.compile(r"\s*(public|private|protected)\s*:(?!:)")
INIT_BRACE = re.compile(r"\)\s*(noexcept\s*)?:[^:].*[\w>]$")


def strip_code(text):
  """Replaces comments, literals and preprocessor lines by blanks, keeping
  newlines so line numbers stay right."""
  out = []
  i, n = 0, len(text)
  line_start = True
  while i < n:
    c = text[i]
    if line_start and c in " \t":
      out.append(c)
      i += 1
      continue
    if line_start and c == "#":
      # A preprocessor line, with its continuations.
      while i < n and text[i] != "\n":
        if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
          out.append(" \n")
          i += 2
          continue
        out.append(" ")
        i += 1
      continue
    line_start = False
    if c == "\n":
      out.append(c)
      line_start = True
      i += 1
    elif text.startswith("//", i):
      while i < n and text[i] != "\n":
        out.append(" ")
        i += 1
    elif text.startswith("/*", i):
      j = text.find("*/", i + 2)
      j = n if j < 0 else j + 2
      out.append(re.sub(r"[^\n]", " ", text[i:j]))
      i = j
    elif c == 'R' and text.startswith('R"', i):
      m = re.match(r'R"([^(\s]*)\(', text[i:])
      if not m:
        out.append(c)
        i += 1
        continue
      end = ")" + m.group(1) + '"'
      j = text.find(end, i + m.end())
      j = n if j < 0 else j + len(end)
      out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
      i = j
    elif c in "\"'":
      # A digit separator (1'000) is not a character literal.
      if c == "'" and i > 0 and text[i - 1].isalnum() and \
          i + 1 < n and text[i + 1].isalnum():
        out.append(" ")
        i += 1
        continue
      j = i + 1
      while j < n and text[j] != c and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
      out.append(c + " " * max(0, j - i - 1) + c)
      i = j + 1
    else:
      out.append(c)
      i += 1
  return "".join(out)


def function_name(head):
  """The name before the parameter list of a function head, or None when
  the head is not a function's."""
  h = " ".join(head.split())
  if not h or CONTROL.match(h) or SCOPE.match(h):
    return None
  if h.startswith("[") or h.endswith("]") or "= [" in h or "=[" in h:
    return None  # a lambda
  # Drop a constructor's initializer list: "X::X(a) : b_(a), c_{}".
  depth = 0
  cut = None
  for k, ch in enumerate(h):
    if ch in "(<[":
      depth += 1
    elif ch in ")>]":
      depth -= 1
    elif ch == ":" and depth == 0:
      if (k + 1 < len(h) and h[k + 1] == ":") or (k > 0 and h[k - 1] == ":"):
        continue
      cut = k
      break
  if cut is not None:
    h = h[:cut].rstrip()
  # Trailing qualifiers and return type.
  h = re.sub(r"\s*->\s*[^()]*$", "", h)
  h = re.sub(
      r"(\s+(const|noexcept|override|final|mutable|volatile|&|&&)"
      r"|\s*noexcept\s*\([^()]*\)|\s*ABSL_[A-Z_]+(\([^()]*\))?)*$", "", h)
  if not h.endswith(")"):
    return None
  depth = 0
  for k in range(len(h) - 1, -1, -1):
    if h[k] == ")":
      depth += 1
    elif h[k] == "(":
      depth -= 1
      if depth == 0:
        before = h[:k].rstrip()
        m = re.search(r"([A-Za-z_~][\w:~<>,\s]*?)$", before)
        if not m:
          return None
        name = m.group(1).split()[-1] if m.group(1).split() else ""
        if not name or "=" in before.split("(")[-1][-2:]:
          return None
        if name in ("if", "for", "while", "switch", "catch", "return",
                    "sizeof", "decltype", "alignof", "static_assert"):
          return None
        return name
  return None


def scan(path, text):
  """Yields (line, name, length) for every function body in `text`."""
  code = strip_code(text)
  stack = []  # per open brace: (kind, start line, name)
  head_start = 0
  line = 1
  head_line = 1
  for k, ch in enumerate(code):
    if ch == "\n":
      line += 1
      continue
    if ch == ";":
      head_start = k + 1
      head_line = line
      continue
    if ch == "{":
      head = code[head_start:k]
      in_function = any(kind == "function" for kind, _, _ in stack)
      if not in_function and INIT_BRACE.search(" ".join(head.split())):
        stack.append(("init", line, None))  # the head goes on after it
        continue
      access = ACCESS.match(head)
      if access:
        head_line += head[:access.end()].count("\n")
        head = head[access.end():]
      name = None if in_function else function_name(head)
      if name:
        # The signature's first line: skip blank lines before the head.
        first = head_line + head[:len(head) - len(head.lstrip())].count("\n")
        stack.append(("function", first, name))
      else:
        stack.append(("scope", line, None))
      head_start = k + 1
      head_line = line
      continue
    if ch == "}":
      if stack:
        kind, first, name = stack.pop()
        if kind == "init":
          continue
        if kind == "function":
          yield first, name, line - first + 1
      head_start = k + 1
      head_line = line


def files_under(roots):
  for root in roots:
    if os.path.isfile(root):
      yield root
      continue
    for dirpath, dirnames, filenames in os.walk(root):
      dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
      for f in sorted(filenames):
        if f.endswith(EXTENSIONS):
          yield os.path.join(dirpath, f)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--max-lines", type=int, default=120)
  parser.add_argument("--top", type=int, default=0,
                      help="also print the K longest functions")
  parser.add_argument("paths", nargs="*")
  args = parser.parse_args()
  if args.max_lines < 1:
    print(f"--max-lines: {args.max_lines} is not a positive number",
          file=sys.stderr)
    return 2
  roots = args.paths or DEFAULT_ROOTS
  for r in roots:
    if not os.path.exists(r):
      print(f"check-function-size: {r}: no such file or folder",
            file=sys.stderr)
      return 2
  found = []
  nfiles = 0
  for path in files_under(roots):
    nfiles += 1
    with open(path, encoding="utf-8", errors="replace") as f:
      text = f.read()
    for first, name, length in scan(path, text):
      found.append((length, path, first, name))
  found.sort(key=lambda t: (-t[0], t[1], t[2]))
  if args.top:
    print(f"check-function-size: the {args.top} longest functions:")
    for length, path, first, name in found[:args.top]:
      print(f"  {path}:{first}: {name} ({length} lines)")
  over = [t for t in found if t[0] > args.max_lines]
  for length, path, first, name in over:
    print(f"{path}:{first}: {name} has {length} lines "
          f"(limit {args.max_lines})")
  if over:
    print(f"check-function-size: {len(over)} function(s) over "
          f"{args.max_lines} lines in {nfiles} files; split them into "
          "named steps")
    return 1
  print(f"check-function-size: {len(found)} functions in {nfiles} files, "
        f"none over {args.max_lines} lines")
  return 0


if __name__ == "__main__":
  sys.exit(main())
