#!/usr/bin/env python3
"""run_cases.py - the bad-input corpus: every case must fail with its exact message.

Drives the real `deftsim` program (DEFTSIM_EXE, set by tests/meson.build) over

  1. tests/badinput/cases/<name>/: each case folder is copied into a fresh temporary
     directory, its `setup` steps build what it needs there (a small trace from
     `deftsim trace gen`, then broken by hand; a broken platform file; a regular file where a
     folder should be), and the command of its `expect` file runs in that directory. The
     exit status and the whole of stderr must be exactly what `expect` says; afterwards no
     temporary file of an atomic write (`*.tmp.<pid>`) may be left, and the paths named by
     `absent:` must not exist (no half-written results).
  2. tests/config/bad/<name>.ini (the scenario-file corpus, checked at the library level by
     tests/config/test_config.c): through the command line, `deftsim config NAME.ini` must
     exit 2 and print "deftsim: input error: " followed by NAME.expect.

Python 3 standard library only. Usage: run_cases.py [NAME...] (default: every case);
-v prints each case; --table prints the Markdown table of tests/badinput/README.md.
tests/badinput/README.md lists the cases and describes the files.
"""
import json
import os
import re
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

SRC = os.environ.get("DEFTSIM_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXE = os.environ.get("DEFTSIM_EXE") or os.path.join(SRC, "build", "deftsim")
CASES = os.path.join(SRC, "tests", "badinput", "cases")
CONFIG_BAD = os.path.join(SRC, "tests", "config", "bad")
TIMEOUT = 60


class CaseError(Exception):
    pass


def env_for_child():
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # strerror texts in English
    return env


NOBODY = 65534


# Runs "$@" with a tmpfs of size $1 mounted on $2, in a mount namespace of its own, and lists
# what it left there in $2.files (outside the mount, which goes with the namespace).
TMPFS_SH = ('mount -t tmpfs -o size="$1" deftsim-bad "$2" || exit 125; d="$2"; shift 2; '
            '"$@"; rc=$?; find "$d" > "$d.files"; exit $rc')


def run_deftsim(args, cwd, fsize=None, as_nobody=False, tmpfs=None):
    """Runs deftsim; with fsize, under a file size limit (writes past it fail with EFBIG:
    SIGXFSZ is ignored in the child, so write() returns the error instead of killing it);
    with as_nobody (when this runs as root), as user and group 65534, whom permissions bind."""
    def pre():
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if as_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    cmd = [EXE] + args
    if tmpfs:
        cmd = ["unshare", "-m", "sh", "-c", TMPFS_SH, "sh", tmpfs[1], tmpfs[0]] + cmd
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          errors="replace", timeout=TIMEOUT, env=env_for_child(),
                          preexec_fn=pre if fsize is not None or as_nobody else None)


# ---- setup steps ---------------------------------------------------------------------------

def safetensors_tensor_offset(path, tensor, element):
    """The file byte offset of element `element` of tensor `tensor` (F32)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    begin, end = header[tensor]["data_offsets"]
    off = 8 + n + begin + 4 * element
    if off + 4 > 8 + n + end:
        raise CaseError(f"{path}: {tensor} has no element {element}")
    return off


def patch_bytes(path, offset, raw):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(raw)


def do_step(words, tmp, state):
    """One setup step. Paths are relative to the case's temporary directory."""
    op, args = words[0], words[1:]
    p = lambda rel: os.path.join(tmp, rel)  # noqa: E731
    if op == "gen":  # gen DIR MODEL WORKERS ITERATIONS: a valid trace to break
        d, model, workers, iters = args
        r = run_deftsim(["trace", "gen", "--model", model, "--workers", workers,
                         "--iterations", iters, "--seed", "1", "-o", d], tmp)
        if r.returncode != 0:
            raise CaseError(f"setup 'gen' failed ({r.returncode}): {r.stderr.strip()}")
    elif op == "deftsim":  # deftsim ARGS...: must succeed (a results folder to break)
        r = run_deftsim(args, tmp)
        if r.returncode != 0:
            raise CaseError(f"setup 'deftsim {' '.join(args)}' failed ({r.returncode}): "
                            f"{r.stderr.strip()}")
    elif op in ("keeplines", "halfline"):
        # keeplines FILE N: the first N lines; halfline FILE N: lines 1 .. N-1 and the first
        # half of line N, without its newline (a file cut in the middle of a row)
        path, n = p(args[0]), int(args[1])
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        if len(lines) <= n:
            raise CaseError(f"setup '{op}': {args[0]} has fewer than {n} lines")
        if op == "keeplines":
            data = b"\n".join(lines[:n]) + b"\n"
        else:
            data = b"\n".join(lines[:n - 1] + [lines[n - 1][:len(lines[n - 1]) // 2]])
        with open(path, "wb") as f:
            f.write(data)
    elif op == "truncate":  # truncate FILE SIZE
        os.truncate(p(args[0]), int(args[1]))
    elif op == "replace":  # replace FILE OLD NEW: the first occurrence of OLD, as bytes
        path, old, new = p(args[0]), args[1].encode(), args[2].encode()
        with open(path, "rb") as f:
            data = f.read()
        if old not in data:
            raise CaseError(f"setup 'replace': {args[1]!r} not in {args[0]}")
        with open(path, "wb") as f:
            f.write(data.replace(old, new, 1))
    elif op == "u64":  # u64 FILE OFFSET VALUE: a little-endian uint64 (the header length)
        patch_bytes(p(args[0]), int(args[1]), struct.pack("<Q", int(args[2])))
    elif op == "f32":  # f32 FILE TENSOR ELEMENT VALUE (nan, inf, -inf, or a number)
        path = p(args[0])
        off = safetensors_tensor_offset(path, args[1], int(args[2]))
        patch_bytes(path, off, struct.pack("<f", float(args[3])))
    elif op == "cp":  # cp FILE COPY
        shutil.copy(p(args[0]), p(args[1]))
    elif op == "rm":  # rm FILE
        os.remove(p(args[0]))
    elif op == "write":  # write FILE TEXT (\n for a newline; steps are split as a shell splits words)
        with open(p(args[0]), "w") as f:
            f.write(" ".join(args[1:]).replace("\\n", "\n"))
    elif op == "mkdir":
        os.makedirs(p(args[0]), exist_ok=True)
    elif op == "chmod":  # chmod OCTAL PATH
        os.chmod(p(args[1]), int(args[0], 8))
    elif op == "fsize":  # fsize BYTES: run the command under this file size limit
        state["fsize"] = int(args[0])
    elif op == "tmpfs":  # tmpfs DIR SIZE: the command sees a file system of SIZE on DIR
        os.makedirs(p(args[0]), exist_ok=True)
        state["tmpfs"] = (args[0], args[1])
    elif op == "nonroot":  # permissions do not bind root: as root, run as nobody
        state["nonroot"] = True
    else:
        raise CaseError(f"unknown setup step '{op}'")


def parse_expect(path):
    want = {"args": None, "exit": None, "stderr": [], "absent": [], "present": []}
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, val = line.partition(":")
            if not sep:
                raise CaseError(f"{path}: '{line}' is not 'key: value'")
            val = val[1:] if val.startswith(" ") else val
            if key == "run":
                want["args"] = val.split()
            elif key == "exit":
                want["exit"] = int(val)
            elif key == "stderr":
                want["stderr"].append(val)
            elif key in ("absent", "present"):
                want[key].append(val)
            else:
                raise CaseError(f"{path}: unknown key '{key}'")
    if want["args"] is None or want["exit"] is None or not want["stderr"]:
        raise CaseError(f"{path}: needs run:, exit: and stderr:")
    return want


def leftovers(tmp):
    """Temporary files of atomic writes (name.tmp.<pid>) or of the row buffer left behind."""
    found = []
    for root, _dirs, files in os.walk(tmp):
        for n in files:
            base, _, pid = n.rpartition(".tmp.")
            if base and pid.isdigit():
                found.append(os.path.relpath(os.path.join(root, n), tmp))
    return found


def run_case(name, verbose):
    folder = os.path.join(CASES, name)
    want = parse_expect(os.path.join(folder, "expect"))
    tmp = tempfile.mkdtemp(prefix=f"deftsim-bad-{name}-")
    try:
        for n in os.listdir(folder):
            if n in ("expect", "setup"):
                continue
            s = os.path.join(folder, n)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, os.path.join(tmp, n))
        # Shared inputs of several cases (tiny model tables) sit beside the case folders.
        for n in os.listdir(os.path.join(CASES, "..", "common")):
            shutil.copy(os.path.join(CASES, "..", "common", n), os.path.join(tmp, n))
        state = {"fsize": None, "nonroot": False, "tmpfs": None}
        setup = os.path.join(folder, "setup")
        if os.path.exists(setup):
            with open(setup) as f:
                for line in f:
                    if line.strip() and not line.lstrip().startswith("#"):
                        do_step(shlex.split(line), tmp, state)
        as_nobody = state["nonroot"] and os.geteuid() == 0
        if as_nobody:
            # The case's files become nobody's (modes kept), and nobody must reach the program.
            for root, dirs, files in os.walk(tmp):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), NOBODY, NOBODY)
            os.chown(tmp, NOBODY, NOBODY)
            # A checkout under a folder only its owner may enter (mktemp -d makes one) keeps
            # nobody from the program: exec then fails in the child, which Python raises here.
            try:
                probe = run_deftsim(["--version"], tmp, as_nobody=True)
                reached = probe.returncode == 0
            except PermissionError:
                reached = False
            if not reached:
                return "skip", f"runs as root, and user {NOBODY} cannot run {EXE}"
        if state["tmpfs"]:
            try:
                probe = subprocess.run(["unshare", "-m", "sh", "-c", TMPFS_SH, "sh", "4k",
                                        state["tmpfs"][0], "true"], cwd=tmp, capture_output=True)
                mounted = probe.returncode == 0
            except OSError:  # no unshare(1)
                mounted = False
            if not mounted:
                return "skip", "cannot mount a tmpfs in a mount namespace here (not root?)"
        subst = lambda s: s.replace("{tmp}", tmp).replace("{src}", SRC)  # noqa: E731
        args = [subst(a) for a in want["args"]]
        r = run_deftsim(args, tmp, state["fsize"], as_nobody, state["tmpfs"])
        problems = []
        if r.returncode != want["exit"]:
            problems.append(f"exit status {r.returncode}, expected {want['exit']}")
        expected = "\n".join(subst(s) for s in want["stderr"]) + "\n"
        # {n} stands for a decimal number that depends on the machine (where a stdio buffer
        # fills); everything else is matched exactly.
        pattern = "[0-9]+".join(re.escape(part) for part in expected.split("{n}"))
        if not re.fullmatch(pattern, r.stderr):
            problems.append(f"stderr:\n    got:  {r.stderr!r}\n    want: {expected!r}")
        if state["tmpfs"]:  # what the command saw on its tmpfs, listed before it went
            with open(os.path.join(tmp, state["tmpfs"][0] + ".files")) as f:
                seen = {os.path.normpath(l.rstrip("\n")) for l in f if l.strip()}
            exists = lambda a: os.path.normpath(a) in seen  # noqa: E731
            left = [a for a in seen if re.search(r"\.tmp\.[0-9]+$", a)]
        else:
            exists = lambda a: os.path.lexists(os.path.join(tmp, a))  # noqa: E731
            left = leftovers(tmp)
        for a in want["absent"]:
            if exists(a):
                problems.append(f"{a} exists (a failed run must not leave it)")
        for a in want["present"]:
            if not exists(a):
                problems.append(f"{a} is missing")
        if left:
            problems.append("temporary files left behind: " + ", ".join(left))
        if verbose:
            print(f"  {name}: exit {r.returncode}: {r.stderr.strip()}")
        return ("fail", "; ".join(problems)) if problems else ("ok", "")
    finally:
        for root, dirs, _files in os.walk(tmp):  # undo chmod so the tree can go
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)


def run_config_case(ini, verbose):
    base = ini[:-4]
    with open(os.path.join(CONFIG_BAD, base + ".expect")) as f:
        msg = f.read().rstrip("\r\n")
    r = run_deftsim(["config", ini], CONFIG_BAD)
    problems = []
    if r.returncode != 2:
        problems.append(f"exit status {r.returncode}, expected 2")
    want = f"deftsim: input error: {msg}\n"
    if r.stderr != want:
        problems.append(f"stderr:\n    got:  {r.stderr!r}\n    want: {want!r}")
    if r.stdout:
        problems.append("printed a configuration on stdout")
    if verbose:
        print(f"  config/bad/{ini}: exit {r.returncode}")
    return ("fail", "; ".join(problems)) if problems else ("ok", "")


def print_table():
    """The README's table: one line per case, its description (the expect file's first
    comment), exit status and message."""
    print("| case | input | exit | message (stderr) |")
    print("|---|---|---|---|")
    for n in sorted(os.listdir(CASES)):
        path = os.path.join(CASES, n, "expect")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            lines = f.read().splitlines()
        what = " ".join(l.lstrip("# ").strip() for l in lines if l.startswith("#"))
        want = parse_expect(path)
        msg = " / ".join(want["stderr"]).replace("|", "\\|").replace("{n}", "N")
        code = f"`` {msg} ``" if "`" in msg else f"`{msg}`"
        print(f"| `{n}` | {what} (`deftsim {' '.join(want['args'])}`) | {want['exit']} | {code} |")


def main(argv):
    if argv == ["--table"]:
        print_table()
        return 0
    verbose = "-v" in argv
    only = [a for a in argv if a != "-v"]
    if not os.access(EXE, os.X_OK):
        print(f"run_cases.py: no deftsim program at {EXE} (set DEFTSIM_EXE)", file=sys.stderr)
        return 1
    names = sorted(n for n in os.listdir(CASES) if os.path.isdir(os.path.join(CASES, n)))
    configs = sorted(n for n in os.listdir(CONFIG_BAD) if n.endswith(".ini"))
    if only:
        names = [n for n in names if n in only]
        configs = [n for n in configs if "config/" + n[:-4] in only or n[:-4] in only]
    counts = {"ok": 0, "fail": 0, "skip": 0}
    for kind, items, fn in (("case", names, run_case), ("config", configs, run_config_case)):
        for n in items:
            try:
                res, why = fn(n, verbose)
            except (CaseError, OSError, subprocess.TimeoutExpired) as e:
                res, why = "fail", f"{type(e).__name__}: {e}"
            counts[res] += 1
            label = n if kind == "case" else "config/bad/" + n
            if res == "fail":
                print(f"FAIL {label}: {why}")
            elif res == "skip":
                print(f"skip {label}: {why}")
    print(f"badinput: {len(names)} cases and {len(configs)} scenario files of tests/config/bad: "
          f"{counts['ok']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    if not only and (len(names) < 30 or len(configs) < 45):
        print("badinput: the corpus shrank (a folder vanished?)")
        return 1
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
