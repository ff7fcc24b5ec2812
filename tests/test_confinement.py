"""Fast tests of the hostile-environment rules (issue 30) on real files and recorded
records: which cache hits prove a cold phase was not cold, which directories may hold
check roots, what a replaced report and a full disk say. The slow proofs with real
sessions are in test_hostile.py."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

from pytest_compilecache.child import confinement
from pytest_compilecache.controller import diskspace
from pytest_compilecache.controller.session import PCH_DIR_ENV
from pytest_compilecache.judge.confinement import foreign_hits, not_cold
from pytest_compilecache.render import report
from pytest_compilecache.isolation import CacheRoot, unsafe_parent


def _entry(key: str, state: str) -> dict:
    return {"key": key, "state": state, "components": []}


def test_a_hit_on_an_entry_the_phase_wrote_itself_is_not_foreign() -> None:
    # the same graph compiled twice in one cold process (64 identical blocks, a reset)
    rec = {"cache": {"graphs": {"0/0": {"fx_graph": [_entry("fabc", "miss")],
                                        "aot_autograd": [], "pgo": {"read": 0, "written": 1}},
                                "1/0": {"fx_graph": [_entry("fabc", "hit")],
                                        "aot_autograd": [], "pgo": {"read": 0, "written": 0}}}}}
    assert foreign_hits(rec) == []


def test_a_hit_on_an_entry_from_elsewhere_and_a_read_profile_are_foreign() -> None:
    rec = {"cache": {"graphs": {"0/0": {"fx_graph": [_entry("fteam", "hit")],
                                        "aot_autograd": [_entry("ateam", "hit")],
                                        "pgo": {"read": 1, "written": 0}}},
                     "dynamo": {"resets": 0}}}
    found = foreign_hits(rec)
    assert found == ["fx_graph hit 1 entr(ies) this process never wrote: fteam",
                     "aot_autograd hit 1 entr(ies) this process never wrote: ateam",
                     "dynamo_pgo read 1 profile(s) before writing any"]
    assert not_cold(found).startswith("was not cold: it began on an empty private")


def test_reclaim_puts_back_what_the_tests_code_changed() -> None:
    env = {"TORCHINDUCTOR_CACHE_DIR": "/srv/team-cache"}
    said = confinement.reclaim({"TORCHINDUCTOR_CACHE_DIR": "/root/x/inductor",
                                "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0"}, env)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": "/root/x/inductor",
                   "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0"}
    assert len(said) == 1 and "TORCHINDUCTOR_CACHE_DIR set to '/srv/team-cache'" in said[0]
    assert "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE removed" in said[0]
    assert confinement.reclaim({"A": "1"}, {"A": "1"}) == []


def test_roots_are_refused_under_a_directory_others_can_write(tmp_path: Path) -> None:
    open_dir, sticky, mine = tmp_path / "open", tmp_path / "sticky", tmp_path / "mine"
    for d, mode in ((open_dir, 0o777), (sticky, 0o1777), (mine, 0o700)):
        d.mkdir()
        os.chmod(d, mode)
    assert "is writable by other users (mode 777, no sticky bit)" in unsafe_parent(open_dir)
    assert unsafe_parent(open_dir / "sub") is not None  # an ancestor counts too
    assert unsafe_parent(sticky) is None and unsafe_parent(mine) is None
    if os.getuid() == 0:
        os.chown(mine, 4242, 4242)
        assert "is owned by another user (uid 4242)" in unsafe_parent(mine)


def test_a_root_swapped_or_opened_is_told_apart(tmp_path: Path) -> None:
    root = CacheRoot.create("t.py::test_x", str(tmp_path / "roots"))
    assert root.tampered() is None
    os.chmod(root.path, 0o755)
    assert "changed owner or mode" in root.tampered()
    os.chmod(root.path, 0o700)
    root.path.rename(tmp_path / "moved")
    (tmp_path / "theirs").mkdir()
    root.path.symlink_to(tmp_path / "theirs")
    assert "was replaced by a symlink to" in root.tampered()
    root.path.unlink()
    root.path.mkdir(mode=0o700)
    assert "was replaced by another directory" in root.tampered()


def test_a_report_replacing_a_symlink_or_a_read_only_file_says_so(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    said = report.write_report(str(link), {"schema": "x", "checks": []})
    assert said and "was a symlink to" in said[0]
    assert not link.is_symlink() and target.read_text() == "{}"  # never written through
    ro = tmp_path / "ro.json"
    ro.write_text("{}")
    os.chmod(ro, 0o444)
    assert "was read-only (mode 444)" in report.write_report(str(ro), {"schema": "x",
                                                                        "checks": []})[0]


def test_a_full_disk_is_named_with_its_path(tmp_path: Path) -> None:
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    said = diskspace.write_problem("the key manifest", tmp_path / "store", e)
    assert said == (f"could not write the key manifest to {tmp_path / 'store'}: No space left "
                    f"on device (errno {errno.ENOSPC}); the disk is full: an environment "
                    f"problem, not the model nor the plugin; free space there or choose "
                    f"another location")
    log = tmp_path / "cold.log"
    log.write_bytes(b"x" * (3 << 20) + b"\nW fx graph unable to write to cache\n"
                    b"OSError: [Errno 28] No space left on device\n")
    assert diskspace.full_lines(log) == ["OSError: [Errno 28] No space left on device"]
    # a process killed mid-write on a full disk leaves its last line unterminated
    log.write_bytes(b"x" * (3 << 20) + b"\nOSError: [Errno 28] No space left on device")
    assert diskspace.full_lines(log) == ["OSError: [Errno 28] No space left on device"]


def test_a_root_others_can_write_is_a_usage_error(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (tmp_path / "test_x.py").write_text("import pytest\n\n@pytest.mark.compile_cache\n"
                                        "def test_x():\n    raise AssertionError('ran')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # nor its own header dir, which it would make there
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", PCH_DIR_ENV)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", f"--compile-cache-root={shared}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    assert f"--compile-cache-root={shared}: {shared} is writable by other users" in err
    assert not list(shared.iterdir())  # no root was made there
