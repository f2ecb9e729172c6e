"""The registry of sparsifiers as `deftsim config --methods` prints it, for the tests that run
every method (or every method with or without a capability): a method added to the registry
joins them without an edit here."""

import subprocess


def methods(exe, caps=(), without=()):
    """Names in registry order of the methods that declare every capability in caps and none
    in without ("default", "keeps-state", "raw-gradients", "own-momentum", "data-free",
    "ddp-buckets", "sends-all")."""
    out = subprocess.run([exe, "config", "--methods"], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    head = out[0].split("\t")
    names = []
    for line in out[1:]:
        row = dict(zip(head, line.split("\t")))
        have = set(row["capabilities"].split(",")) - {""}
        if set(caps) <= have and not have & set(without):
            names.append(row["name"])
    if not names:
        raise SystemExit(f"{exe} config --methods: no method with {caps} without {without}")
    return names
