#!/usr/bin/env python3
"""sizes.py - no library file over 1000 lines, no function over 150 (docs/ARCHITECTURE.md,
"Conventions").

Reads every C, CUDA and header file of the checkout outside tests/ (tracked, or new and not
ignored). A function is what the project's style writes at the left margin: its signature,
then a line that is exactly "{", the body, then a line starting with "}"; its length counts
both brace lines. Fails naming the file, the function, its first line and its length; prints
the five longest functions and files when it passes. Python 3 standard library only; run by
meson as the fast test `sizes`.
"""
import os
import re
import subprocess
import sys

SRC = os.environ.get("DEFTSIM_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CODE = (".c", ".h", ".cu", ".cuh", ".inc")
MAX_FILE = 1000
MAX_FUNC = 150
# Where a concept is longer than the guard, with the reason; the limit still holds them.
ALLOW_FILE = {}
NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def files():
    out = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    names = out.decode("utf-8", "surrogateescape").split("\0")
    return sorted(f for f in names
                  if f.endswith(CODE) and not f.startswith("tests/")
                  and os.path.isfile(os.path.join(SRC, f)))


def functions(lines):
    """(name, first line, length) of every function body that opens with "{" at the margin."""
    out = []
    start = None
    for i, line in enumerate(lines):
        if start is None and line.rstrip() == "{":
            j = i - 1
            while j >= 0 and "(" not in lines[j] and lines[j].strip():
                j -= 1
            m = NAME.search(lines[j]) if j >= 0 else None
            start, name = i, (m.group(1) if m else "?")
        elif start is not None and line.startswith("}"):
            out.append((name, start + 1, i - start + 1))
            start = None
    return out


def main():
    bad = []
    longest_files, longest_funcs = [], []
    for f in files():
        with open(os.path.join(SRC, f), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        longest_files.append((n, f))
        limit = ALLOW_FILE.get(f, (MAX_FILE, ""))[0]
        if n > limit:
            bad.append(f"{f}: {n} lines (at most {limit})")
        for name, first, length in functions(lines):
            longest_funcs.append((length, f"{f}:{first} {name}"))
            if length > MAX_FUNC:
                bad.append(f"{f}:{first}: function {name} is {length} lines (at most {MAX_FUNC})")
    if not longest_files:
        print("sizes: no source files found under " + SRC, file=sys.stderr)
        return 1
    for b in bad:
        print("sizes: " + b, file=sys.stderr)
    if bad:
        return 1
    print("longest files:", ", ".join(f"{f} ({n})" for n, f in sorted(longest_files)[-5:]))
    print("longest functions:", ", ".join(f"{f} ({n})" for n, f in sorted(longest_funcs)[-5:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
