"""`pytest-compilecache accept REF`: the key changes between REF and this commit,
accepted in the repository's `compilecache-accepted.json` (history/accepted_drift.py),
for the PR that makes them to commit and its reviewer to read. Like syrupy's
`--snapshot-update`, it writes what the checks now compute; unlike a blanket
`--compile-cache-allow-drift=gm`, each entry accepts that one change of that one check.
Reads the key manifests in the store (a keys-only session recorded them): no torch.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from pytest_compilecache.clifiles import CliError, as_manifest, files, load
from pytest_compilecache.history import accepted_drift as ad
from pytest_compilecache.history import manifest as mf


def cmd_accept(args: argparse.Namespace) -> int:
    from pytest_compilecache.history import git as history
    from pytest_compilecache.history.locate import components_loader

    try:
        path = history.require_root(Path.cwd()) / ad.FILE
    except history.GitError as e:
        raise CliError(f"the accepted drift is kept in the repository: {e}") from None
    pytest_args = _after_dashes(args.pytest_args)
    if pytest_args:
        _record_head(args.ref, pytest_args, args.store)
    pa, pb = files(args, [args.ref, args.head])
    a, b = load(pa), load(pb)
    base, head = as_manifest(a, pa), as_manifest(b, pb)
    cmps = mf.compare(base, head, args.check or None, (),
                      components_loader(a, base, pa, args.store),
                      components_loader(b, head, pb, args.store))
    try:
        before = ad.load(path)
    except ad.AcceptedFileError as e:
        raise CliError(str(e)) from None
    after = ad.update(before, cmps, mf.commit_label(base), prune_only=args.prune)
    said = _changes(before, after)
    if said:
        ad.write(path, after)
    print("\n".join(said + [f"{path}: " + (
        f"{len(after)} check(s) accepted; commit it with the change: its diff is the review"
        if said else "nothing to change")]))
    return 0


# accept's own options: after REF (with no `--`) they are misplaced, not pytest's
_OWN_OPTIONS = ("--check", "--head", "--prune", "--store", "--environment")


def _after_dashes(rest: List[str]) -> List[str]:
    """pytest's arguments after `--`. argparse keeps that `--` before its remainder on
    some Pythons and drops it on others (3.11.7 drops it: `accept main -- tests` came
    as `tests`), so only one of accept's own options says an option came after REF."""
    if rest[:1] == ["--"]:
        return rest[1:]
    if rest and rest[0].split("=")[0] in _OWN_OPTIONS:
        raise CliError(f"options go before REF, pytest's arguments after --: "
                       f"{' '.join(rest)}")
    return rest


def _record_head(ref: str, pytest_args: List[str], store: Optional[str] = None) -> None:
    """The keys-only session that records this commit's keys (and REF's, where the
    store lacks them) first, into the store accept then reads: its drift is what is
    accepted, so its exit status is not."""
    argv = [sys.executable, "-m", "pytest", *pytest_args, "--compile-cache-check",
            "--compile-cache-keys-only", f"--compile-cache-baseline={ref}", "-q",
            *([f"--compile-cache-store={store}"] if store else [])]
    print("recording the keys: " + " ".join(argv[1:]), flush=True)
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL).returncode
    if rc not in (0, 1):  # 1: drift, or a check that failed (its keys are recorded)
        raise CliError(f"the keys-only session exited {rc}: run it to see why: "
                       + " ".join(argv[1:]))


def _changes(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
    out = [f"pruned    {n} (stale)" for n in sorted(set(before) - set(after))]
    for n in sorted(after):
        if before.get(n) != after[n]:
            comps = ", ".join(after[n]["components"][:6]) or "graphs added or removed"
            out.append(f"accepted  {n}: {comps} ({len(after[n]['graphs'])} graph(s))")
    return out


def add_parser(sub: Any, rev_help: str) -> None:
    p = sub.add_parser("accept", help=f"accept the key changes between REF and HEAD in "
                                      f"{ad.FILE} at the repository root, to commit with the "
                                      f"change (stale entries pruned)")
    p.add_argument("ref", metavar="REF", help="the base: " + rev_help)
    p.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="after --: pytest arguments selecting the checks; a keys-only "
                        "session against REF records their keys first (without: the "
                        "store's manifests, as the last session recorded them)")
    p.add_argument("--check", action="append", metavar="NODEID", help="only this check")
    p.add_argument("--head", default="HEAD", help="the commit whose keys are accepted "
                                                  "(default: HEAD)")
    p.add_argument("--prune", action="store_true",
                   help="only drop the stale entries; accept nothing new")
    p.add_argument("--store", metavar="DIR",
                   help="the manifest store (default: .compilecache at the repository root)")
    p.add_argument("--environment", metavar="ID",
                   help="the manifests of this environment (a prefix), where there are several")
    p.set_defaults(func=cmd_accept)
