#!/usr/bin/env python3
"""layers.py - every folder includes only what docs/ARCHITECTURE.md lets it depend on.

The rule lives in one place, the "Folders" table of docs/ARCHITECTURE.md: a row names one or
more folders (in backticks) and, in its "may depend on" column, the folders below it that it
may use. This test reads that table, so the document and the code cannot drift apart:

- every C, CUDA or header file of the checkout (tracked, or new and not ignored) belongs to the deepest folder of the table that holds it
  (traces/cuda/ before traces/, src/engine/ before src/);
- every header named by an `#include "..."` line is found among the tracked files (or among the
  headers a meson.build generates, such as deftsim_build_info.h) and mapped to its folder the
  same way;
- an include is allowed when the header is in the including file's own folder or in a folder
  its row may depend on. Words of the column that are no folder of the table (libc, jansson,
  SimGrid, ...) name outside libraries, reached through <...> includes, and are not checked.
  "all of the above" stands for every folder of the rows above; "libdeftsim" for the folders of
  the core library (the rows above under src/) and what they may depend on; a folder in
  backticks for that folder.

Fails, naming file, line and header, on every include that crosses the table, on an include of
a header that no folder holds, and when the table cannot be read. Python 3 standard library
only; run by meson as the fast test `layers`.
"""
import os
import re
import subprocess
import sys

SRC = os.environ.get("DEFTSIM_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = os.path.join("docs", "ARCHITECTURE.md")
CODE = (".c", ".h", ".cu", ".cuh", ".inc", ".h.in")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def tracked_files():
    try:
        # Tracked files and new ones not yet added (but not ignored ones: build output).
        out = subprocess.run(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        return [f for f in out.decode("utf-8", "surrogateescape").split("\0")
                if f and os.path.isfile(os.path.join(SRC, f))]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(SRC):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
        files += [os.path.relpath(os.path.join(root, n), SRC).replace(os.sep, "/") for n in names]
    return files


def read_table(text):
    """[(folders, deps)] in row order: folders as "name/" paths, deps as the column's words."""
    lines = text.splitlines()
    try:
        start = lines.index("## Folders")
    except ValueError:
        raise SystemExit(f"layers: {DOC} has no '## Folders' section")
    header = None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != len(header):
            raise SystemExit(f"layers: {DOC}: a row of {len(cells)} cells, the header has "
                             f"{len(header)}: {line}")
        rows.append(dict(zip(header, cells)))
    if header is None or "folder" not in header or "may depend on" not in header:
        raise SystemExit(f"layers: {DOC}: the Folders table needs the columns 'folder' and "
                         f"'may depend on'")
    table = []
    for r in rows:
        folders = [f.rstrip("/") + "/" for f in re.findall(r"`([^`]+)`", r["folder"])]
        if not folders:
            raise SystemExit(f"layers: {DOC}: a row names no folder: {r['folder']}")
        deps = []
        for w in r["may depend on"].split(","):
            quoted = re.findall(r"`([^`]+)`", w)
            deps += [q.strip().rstrip("/") for q in quoted] if quoted else [w.strip().lower()]
        table.append((folders, deps))
    return table


def allowed_folders(table):
    """folder -> the set of folders its files may include from (itself included)."""
    names = {}
    for folders, _ in table:
        for f in folders:
            names[f.rstrip("/")] = f
    allowed = {}
    for i, (folders, deps) in enumerate(table):
        ok = set(folders)
        for d in deps:
            if d == "all of the above":
                for above, _ in table[:i]:
                    ok.update(above)
            elif d == "libdeftsim":
                for above, _ in table[:i]:
                    for f in above:
                        if f.startswith("src/"):
                            ok.update(allowed[f])
            elif d.rstrip("/") in names:
                ok.add(names[d.rstrip("/")])
            elif "/" in d:
                raise SystemExit(f"layers: {DOC}: '{d}' in 'may depend on' is no folder of the "
                                 f"table")
        for f in folders:
            allowed[f] = ok
    return allowed


def folder_of(path, folders):
    best = None
    for f in folders:
        if path.startswith(f) and (best is None or len(f) > len(best)):
            best = f
    return best


def generated_headers(files):
    """Headers meson writes into a folder's build directory: name -> source folder."""
    out = {}
    for f in files:
        if os.path.basename(f) != "meson.build":
            continue
        with open(os.path.join(SRC, f), encoding="utf-8") as fh:
            text = fh.read()
        d = os.path.dirname(f)
        for name in re.findall(r"output\s*:\s*'([^']+\.h)'", text):
            out[name] = (d + "/") if d else ""
    return out


def main():
    with open(os.path.join(SRC, DOC), encoding="utf-8") as fh:
        table = read_table(fh.read())
    allowed = allowed_folders(table)
    folders = list(allowed)
    files = tracked_files()

    where = {}
    for f in files:
        if f.endswith((".h", ".cuh", ".inc")):
            where.setdefault(os.path.basename(f), set()).add(f)
        elif f.endswith(".h.in"):
            where.setdefault(os.path.basename(f)[:-3], set()).add(f)
    for name, d in generated_headers(files).items():
        where.setdefault(name, set()).add(d + name)

    bad = []
    checked = 0
    for f in files:
        if not f.endswith(CODE):
            continue
        home = folder_of(f, folders)
        if home is None:
            continue
        try:
            with open(os.path.join(SRC, f), encoding="utf-8", errors="replace") as fh:
                lines = fh.readlines()
        except OSError as e:
            bad.append(f"{f}: cannot read: {e}")
            continue
        for no, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            inc = m.group(1)
            here = os.path.normpath(os.path.join(os.path.dirname(f), inc)).replace(os.sep, "/")
            if "/" in inc and here in files:
                targets = {here}
            else:
                targets = where.get(os.path.basename(inc), set())
            if not targets:
                bad.append(f"{f}:{no}: includes \"{inc}\", which no folder holds")
                continue
            homes = {folder_of(t, folders) for t in targets}
            if len(homes) > 1:
                bad.append(f"{f}:{no}: \"{inc}\" is ambiguous: {', '.join(sorted(targets))}")
                continue
            tf = next(iter(homes))
            if tf is None or tf in allowed[home]:
                continue
            bad.append(f"{f}:{no}: {home} includes \"{inc}\" from {tf}, which {DOC} does not "
                       f"let it depend on (may: {', '.join(sorted(allowed[home]))})")
    if not checked:
        bad.append("no #include \"...\" line found: is the source tree there?")
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"layers: {len(bad)} problem(s)", file=sys.stderr)
        return 1
    print(f"layers: {checked} includes of {len(folders)} folders follow {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
