"""`pytest-compilecache show | diff | accept | merge | bisect | trend | clean` (also
`python -m pytest_compilecache`).

show and diff read JSON only (reports or manifests) and never import torch; bisect
records manifests by running the selected checks' cold phase at each commit it tests.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from pytest_compilecache import cliaccept
from pytest_compilecache.clifiles import CliError, as_manifest, files, load, only
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.bisect import Unrecordable
from pytest_compilecache.render import lines as tx, report
from pytest_compilecache.terms import ENV_FIELDS

# 0: same keys (or done), 1: keys differ, 2: an error (bad arguments, a file that is
# unreadable, malformed or of a newer schema): CI can tell drift from a broken artifact
EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2


def cmd_show(args: argparse.Namespace) -> int:
    path = files(args, [args.file])[0]
    data = only(load(path), args.checks, path)
    if mf.is_manifest(data):
        if args.format != "text":
            raise CliError(f"--format {args.format} takes a report, not a manifest")
        print("\n".join(mf.manifest_lines(data)))
        return EXIT_OK
    if args.format == "markdown":
        from pytest_compilecache.render import markdown

        sys.stdout.write(markdown.render(data, artifact=args.artifact))
        return EXIT_OK
    if args.format in ("github", "outputs"):
        from pytest_compilecache.render import gha

        lines = (gha.annotation_lines(data, args.workspace) if args.format == "github" else
                 gha.output_lines(gha.outputs(data, path)))
        print("\n".join(lines))
        return EXIT_OK
    from pytest_compilecache.model import OK_VERDICTS, CheckResult

    results = [CheckResult.from_json(c) for c in data.get("checks", [])]
    commit = data.get("commit") or {}
    print(f"report of {len(results)} check(s), created {data.get('created')}, commit "
          f"{commit.get('short', 'unknown')}{' (dirty)' if commit.get('dirty') else ''}")
    for r in results:
        if r.verdict not in OK_VERDICTS:
            print("\n".join(tx.failure_lines(r)) + "\n")
    print("\n".join(tx.summary_lines(results)))
    for t in data.get("trend") or []:  # the history the session read from the store
        if isinstance(t, dict):
            print(f"\ntrend (environment {t.get('environment', '?')}):")
            print("\n".join(trend_lines(t)))
    return EXIT_OK


def trend_lines(t: Dict[str, Any]) -> List[str]:
    from pytest_compilecache.history import trend

    return [str(t["error"])] if t.get("error") else trend.table_lines(t)


def _alert(value: str) -> float:
    from pytest_compilecache.options import parse_alert

    return parse_alert(value)


def cmd_trend(args: argparse.Namespace) -> int:
    """The store's last commits per environment, as the report's trend shows them."""
    from pytest_compilecache.history import git as history, trend
    from pytest_compilecache.history.store import DEFAULT_DIR, ManifestStore

    if args.store:
        root = Path(args.store)
    else:
        repo = history.repo_root(Path.cwd())
        root = (repo or Path.cwd()) / DEFAULT_DIR
    envs = sorted(p.name for p in (root / "manifests").glob("*") if p.is_dir())
    if args.environment:
        envs = [e for e in envs if e.startswith(args.environment)]
    if not envs:
        raise CliError(f"no manifests in {root}/manifests"
                       + (f" for environment {args.environment}" if args.environment else "")
                       + ": a session with --compile-cache-check records them")
    store, line = ManifestStore(root), history.on_line(root.parent)
    for env in envs:
        history_ = trend.commits(store.recent(env, 4 * args.commits + 20), args.commits, line)
        print(f"environment {env}:")
        count = functools.partial(history.count_between, root.parent)
        print("\n".join(trend.table_lines(trend.to_json(
            history_, args.alert, count, trend.store_explain(store)))))
    return EXIT_OK


def print_diff(base: Dict[str, Any], head: Dict[str, Any], nodeids: Optional[Sequence[str]],
               allow: Sequence[str] = (), load_old: mf.Loader = mf.inline,
               load_new: mf.Loader = mf.inline) -> bool:
    """Print the per-check comparison; True when any check drifted. Compared before a
    line is printed: components that cannot be loaded end it with nothing printed."""
    cmps = mf.compare(base, head, nodeids, allow, load_old, load_new)
    print(f"base: {mf.commit_label(base)}\nhead: {mf.commit_label(head)}")
    benv, henv = base.get("environment") or {}, head.get("environment") or {}
    if benv and henv and benv != henv:
        print("note: different environments, so keys differ by design: " + ", ".join(
            f"{k} {benv.get(k)} -> {henv.get(k)}" for k in ENV_FIELDS if benv.get(k) != henv.get(k)))
    drifted = False
    for nodeid, cmp in cmps.items():
        print("\n".join(mf.drift_lines(nodeid, cmp)))
        drifted |= cmp["status"] in ("drifted", "gone", "new")
    return drifted


def cmd_diff(args: argparse.Namespace) -> int:
    from pytest_compilecache.history.locate import components_loader

    pa, pb = files(args, [args.a, args.b])
    a, b = load(pa), load(pb)
    base, head = as_manifest(a, pa), as_manifest(b, pb)
    checks = [*args.checks, *(args.check or [])]
    return (EXIT_DIFFERENT if print_diff(base, head, checks or None, (),
                                         components_loader(a, base, pa, args.store),
                                         components_loader(b, head, pb, args.store))
            else EXIT_OK)


def cmd_bisect(args: argparse.Namespace) -> int:
    from pytest_compilecache.history import git as history

    cwd = Path.cwd()
    try:
        repo = history.require_root(cwd)
        good = history.resolve(repo, args.good)
        commits = history.commits_between(repo, args.good, args.bad)
    except history.GitError as e:
        print(f"pytest-compilecache bisect: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not commits:
        print(f"pytest-compilecache bisect: no commits after {args.good} up to {args.bad}",
              file=sys.stderr)
        return EXIT_USAGE
    from pytest_compilecache.child.workload import environment_of_python
    from pytest_compilecache.history.bisect import Manifests

    manifests = Manifests(repo, cwd, args.pytest_args, args.store,
                          mf.environment_id(environment_of_python(args.device)), args.device)
    print(f"bisecting {len(commits)} commit(s) after {good['short']} up to {args.bad}")
    try:
        return _bisect(good, commits, args.bad, manifests)
    except (Unrecordable, mf.BadManifest) as e:  # BadManifest: names the file, the repair
        print(f"pytest-compilecache bisect: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not manifests.recorded:  # nothing recorded: no log to point to
            import shutil

            shutil.rmtree(manifests.logdir, ignore_errors=True)


def _bisect(good: Dict[str, Any], commits: List[Dict[str, Any]], bad: str,
            manifests: Any) -> int:
    """`manifests.store`: where every manifest tested is, with its components."""
    base, targets = manifests.good(good)
    store = manifests.store
    if not targets:
        raise Unrecordable(f"the selected checks recorded no keys at {good['short']}")
    cache: Dict[int, bool] = {}

    def drifted(i: int) -> bool:
        if i not in cache:
            head = manifests.at(commits[i], targets)
            cache[i] = mf.differs(base, head, targets, store.loader(base), store.loader(head))
            print(f"  {commits[i]['short']}: {'keys differ' if cache[i] else 'same keys'}")
        return cache[i]

    if not drifted(len(commits) - 1):
        print(f"no key drift between {good['short']} and {bad} for {', '.join(targets)}")
        return EXIT_DIFFERENT
    lo, hi = 0, len(commits) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if drifted(mid):
            hi = mid
        else:
            lo = mid + 1
    first = commits[hi]
    print(f"\nfirst commit whose cache keys differ from {good['short']}: {first['sha']} "
          f"\"{first.get('subject', '')}\"")
    print(f"({len(cache)} of {len(commits)} commits tested, {len(manifests.recorded)} "
          f"recorded, the rest read from {store.root})\n")
    head = manifests.at(first, targets)
    print_diff(base, head, targets, (), store.loader(base), store.loader(head))
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from pytest_compilecache.render.shard import merge_reports

    reports = [load(path) for path in args.reports]
    if any(mf.is_manifest(r) for r in reports):
        raise CliError("merge takes reports, not manifests")
    merged = merge_reports(reports)
    report.write_report(args.output, merged)
    print(f"merged {len(reports)} report(s), {len(merged['checks'])} check(s) into "
          f"{args.output}: " + ", ".join(f"{v} {n}" for v, n in merged["summary"].items() if n))
    return EXIT_OK


def cmd_clean(args: argparse.Namespace) -> int:
    from pytest_compilecache import leftovers
    from pytest_compilecache.isolation import ROOT_PARTS, cache_roots

    print("\n".join(leftovers.clean(cache_roots(args.root), ROOT_PARTS, args.min_age * 60,
                                    args.dry_run)))
    return EXIT_OK


REV_HELP = ("a commit (a branch, tag, sha, HEAD~2: its manifest in the store), or a "
            "report or manifest file")


def _store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="DIR",
                   help="the manifest store a commit's manifest and the key components are "
                        "read from (default: .compilecache at the repository root; for a "
                        "file, the store it is in, or the one a report names)")
    p.add_argument("--environment", metavar="ID",
                   help="a commit's manifest of this environment (a prefix), where the store "
                        "has several")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pytest-compilecache",
                                description="Read pytest-compilecache reports and key "
                                            "manifests; find the commit that changed a key.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("show", help="print a report's tables, or the keys of a commit or "
                                    "manifest")
    s.add_argument("file", metavar="REV_OR_FILE", help=REV_HELP)
    s.add_argument("checks", nargs="*", metavar="NODEID", help="only these checks")
    _store_options(s)
    s.add_argument("--format", default="text", choices=("text", "markdown", "github", "outputs"),
                   help="text (default); markdown: a GitHub job summary; github: workflow "
                        "commands annotating the failing checks; outputs: name=value lines "
                        "for $GITHUB_OUTPUT")
    s.add_argument("--artifact", help="markdown: the artifact name that holds the full report")
    s.add_argument("--workspace", default=os.environ.get("GITHUB_WORKSPACE"),
                   help="github: the repository root annotation paths are relative to "
                        "(default: $GITHUB_WORKSPACE)")
    s.set_defaults(func=cmd_show)
    d = sub.add_parser("diff", help="compare the cache keys of two commits, reports or "
                                    "manifests (exit 0: same, 1: they differ, 2: an error)")
    d.add_argument("a", metavar="A", help=REV_HELP)
    d.add_argument("b", metavar="B", help=REV_HELP)
    d.add_argument("checks", nargs="*", metavar="NODEID", help="only these checks")
    d.add_argument("--check", action="append", metavar="NODEID", help="only this check")
    _store_options(d)
    d.set_defaults(func=cmd_diff)
    cliaccept.add_parser(sub, REV_HELP)
    m = sub.add_parser("merge", help="merge the reports of several machines (shards) into one")
    m.add_argument("reports", nargs="+", metavar="REPORT")
    m.add_argument("-o", "--output", required=True, metavar="REPORT")
    m.set_defaults(func=cmd_merge)
    b = sub.add_parser("bisect", help="find the first commit after GOOD whose key manifest "
                                      "differs from GOOD's: bisect GOOD BAD -- <pytest args>")
    b.add_argument("good", metavar="GOOD")
    b.add_argument("bad", metavar="BAD")
    b.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="after --: pytest arguments selecting the check(s), e.g. a node id")
    b.add_argument("--store", help="manifest store (default: .compilecache at the repo root)")
    b.add_argument("--device", default=os.environ.get("PYTEST_COMPILECACHE_DEVICE", "auto"),
                   choices=("auto", "cpu", "cuda"),
                   help="where the checks compile when a commit is recorded, and whose "
                        "environment's manifests are compared (default: "
                        "$PYTEST_COMPILECACHE_DEVICE, else auto: cuda where a GPU is seen)")
    b.set_defaults(func=cmd_bisect)
    t = sub.add_parser("trend", help="warm starts over the last commits in the store: cold "
                       "and warm seconds, layer misses, and the commits flagged")
    t.add_argument("--store", metavar="DIR",
                   help="manifest store (default: .compilecache at the repo root)")
    t.add_argument("-n", "--commits", type=int, default=10, metavar="N")
    t.add_argument("--alert", type=_alert, default=2.0, metavar="X",
                   help="flag warm/cold at X times the commit before's (default 2)")
    t.add_argument("--environment", metavar="ID", help="only this environment (a prefix)")
    t.set_defaults(func=cmd_trend)
    c = sub.add_parser("clean", help="remove the cache roots that checks kept (failing ones, "
                                     "or all with --compile-cache-keep) and what sessions "
                                     "that did not finish left in the temp dir; never what a "
                                     "running session made")
    c.add_argument("--root", help="where the roots are (--compile-cache-root; default: the "
                                  "temp dir)")
    c.add_argument("--min-age", type=float, default=60.0, metavar="MINUTES",
                   help="leave what was touched more recently (default: 60); what a "
                        "running process made is left whatever its age")
    c.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    c.set_defaults(func=cmd_clean)
    return p


def safe_output() -> None:
    """Text the files hold but UTF-8 cannot encode (a node id with a lone surrogate: how
    Python decodes a file name's undecodable bytes) is written as a backslash escape on
    stdout and stderr: never a UnicodeEncodeError, never invalid UTF-8 in a job summary."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot be reconfigured: as it is
                pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    safe_output()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, mf.BadManifest, mf.NoStore) as e:
        print(f"pytest-compilecache {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
