#!/usr/bin/env python3
"""no_outside_refs.py - the repository stands alone: no tracked file may point at material that
lives outside it (a folder beside the clone, such as a sibling checkout's shared specs or model
tables). docs/SPARSIFIERS.md defines the sparsifiers and traces/models/ holds the model tables;
cite those instead.

Lists the tracked files with `git ls-files` (or, outside a git checkout, walks the source tree,
skipping hidden folders and build output) and fails, naming file and line, on every
occurrence of a forbidden reference. The patterns are assembled at run time, so this file does
not match itself. Python 3 standard library only; run by meson as the fast test
`no_outside_refs`.
"""
import os
import subprocess
import sys

SRC = os.environ.get("DEFTSIM_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# A path that climbs out of the repository into a sibling "shared" folder, and the names of
# what that folder held.
UP = ".."
PATTERNS = [p.encode() for p in (UP + "/shared", "shared/" + "spec/", "spec/" + "sparsifiers")]


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
        return [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(SRC):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
        files += [os.path.relpath(os.path.join(root, n), SRC) for n in names]
    return files


def main():
    hits = []
    files = tracked_files()
    for rel in files:
        path = os.path.join(SRC, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if not any(p in data for p in PATTERNS):
            continue
        for no, line in enumerate(data.split(b"\n"), 1):
            for p in PATTERNS:
                if p in line:
                    text = line.decode("utf-8", "replace").strip()
                    hits.append(f"{rel}:{no}: refers to '{p.decode()}' outside the repository: "
                                f"{text[:160]}")
                    break
    for h in hits:
        print(h, file=sys.stderr)
    if hits:
        print(f"no_outside_refs.py: {len(hits)} reference(s) to material outside the repository "
              f"(cite docs/SPARSIFIERS.md or traces/models/ instead)", file=sys.stderr)
        return 1
    print(f"no_outside_refs.py: {len(files)} files, no reference outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
