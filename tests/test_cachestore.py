"""The compile caches kept in the store (history/cachestore.py), on directories made
here: what is kept, what is refused (they are code), what is pruned. The sessions that
keep and deploy from them: tests/test_drift.py."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import pytest

from pytest_compilecache.history.cachestore import (KEEP_COMMITS, MAX_GB_ENV, SavedCaches,
                                                    Unusable, check_dir)

NODE = "tests/test_net.py::test_net"
ENV = "torch2.13.0_cpu-cpu-py3.11.7-825d3b2e"


def a_root(tmp_path: Path, name: str = "root") -> Dict[str, Path]:
    """A check's root as a passing check leaves it: caches, the cold record, outputs."""
    root = tmp_path / name
    (root / "inductor" / "fx" / "ab").mkdir(parents=True)
    (root / "inductor" / "fx" / "ab" / "entry").write_bytes(b"x" * 100)
    (root / "inductor" / "ab" / "kernel.py").parent.mkdir(parents=True)
    (root / "inductor" / "ab" / "kernel.py").write_text("def call(): pass\n")
    (root / "inductor" / "locks").mkdir()
    (root / "inductor" / "locks" / "x.lock").write_text("")
    (root / "inductor" / "pch").symlink_to(tmp_path)  # the session's shared headers
    (root / "triton").mkdir()
    (root / "tmp").mkdir()
    (root / "phases").mkdir()
    (root / "phases" / "cold.json").write_text('{"phase": "cold"}')
    (root / "phases" / "cold-outputs.pt").write_bytes(b"outputs")
    (root / "phases" / "warm.json").write_text('{"phase": "warm"}')
    return {"inductor": root / "inductor", "triton": root / "triton", "tmp": root / "tmp",
            "phases": root / "phases"}


def save(store: SavedCaches, tmp_path: Path, sha: str = "a" * 40, env: str = ENV) -> Path:
    dirs = a_root(tmp_path, f"root-{sha[:4]}-{env[-4:]}")
    phases = dirs.pop("phases")
    return store.save(env, sha, NODE, dirs, phases)


def test_a_kept_check_is_found_restored_and_private(tmp_path: Path) -> None:
    store = SavedCaches(tmp_path / "store")
    kept = save(store, tmp_path)
    assert kept == tmp_path / "store" / "caches" / ENV / ("a" * 40) / check_dir(NODE)
    assert not (kept / "inductor" / "locks").exists()  # locks are no cache
    assert not (kept / "inductor" / "pch").exists()  # nor links out of the root
    assert not (kept / "phases" / "warm.json").exists()  # only what the deploy reads
    assert all(p.stat().st_mode & 0o077 == 0 for p in [kept, *kept.rglob("*")])
    found = store.find("a" * 40, NODE)
    assert found is not None and (found.env_id, found.files) == (ENV, 5)  # 4 and meta.json
    assert found.size > 100 + 17 + 17 + 7
    assert store.find("b" * 40, NODE) is None and store.find("a" * 40, "tests/x.py::t") is None
    dest = {d: tmp_path / "empty" / d for d in ("inductor", "triton", "tmp", "phases")}
    for d in dest.values():
        d.mkdir(parents=True)
    phases = dest.pop("phases")
    found.restore(dest, phases)
    assert (dest["inductor"] / "ab" / "kernel.py").read_text() == "def call(): pass\n"
    assert (phases / "cold.json").read_text() == '{"phase": "cold"}'
    assert (phases / "cold-outputs.pt").read_bytes() == b"outputs"


def test_saving_again_replaces_and_old_commits_are_pruned(tmp_path: Path) -> None:
    store = SavedCaches(tmp_path / "store")
    shas = [c * 40 for c in "abcde"]
    for i, sha in enumerate(shas):
        kept = save(store, tmp_path, sha)
        os.utime(kept.parent, (1000 + i, 1000 + i))  # commit i saved at time i
    assert store.summary() == {ENV: shas[::-1][:KEEP_COMMITS]}
    save(store, tmp_path / "again", shas[4])  # again: replaced, nothing doubled
    assert len(list((store.root / ENV / shas[4]).iterdir())) == 1


def test_the_preferred_environment_else_the_newest_save_is_found(tmp_path: Path) -> None:
    store = SavedCaches(tmp_path / "store")
    save(store, tmp_path, env="env-one")
    save(store, tmp_path, env="env-two")
    assert store.find("a" * 40, NODE).env_id == "env-two"
    assert store.find("a" * 40, NODE, prefer_env="env-one").env_id == "env-one"


@pytest.mark.parametrize("spoil, why", [
    (lambda p: p.chmod(0o666), "writable by other users"),
    (lambda p: os.chown(p, 12345, -1), "owned by another user"),
    (lambda p: (p.unlink(), p.symlink_to("/etc/passwd")), "a link to /etc/passwd"),
    (lambda p: (p.unlink(), os.mkfifo(p)), "not a plain file or directory"),
])
def test_caches_someone_else_could_have_written_are_refused(tmp_path: Path, spoil, why) -> None:
    if why.startswith("owned") and os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    store = SavedCaches(tmp_path / "store")
    kept = save(store, tmp_path)
    spoil(kept / "inductor" / "ab" / "kernel.py")
    with pytest.raises(Unusable, match=why) as e:
        store.find("a" * 40, NODE)
    assert "refusing them" in str(e.value)


def test_the_stores_own_directories_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)  # group-writable by default, as on many self-hosted runners
    try:
        store = SavedCaches(tmp_path / "store")
        save(store, tmp_path)
    finally:
        os.umask(old)
    for d in (store.root, store.root / ENV, store.root / ENV / ("a" * 40)):
        assert d.stat().st_mode & 0o777 == 0o700, d
    assert store.find("a" * 40, NODE) is not None


def test_a_caches_copy_too_large_for_any_restore_is_not_kept(tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setenv(MAX_GB_ENV, "0.00000005")  # ~54 bytes
    store = SavedCaches(tmp_path / "store")
    with pytest.raises(Unusable, match="over the"):
        save(store, tmp_path)
    assert not list((store.root / ENV / ("a" * 40)).iterdir())  # its temporary copy gone


def test_another_environments_refused_copy_does_not_hide_a_usable_one(tmp_path: Path) -> None:
    store = SavedCaches(tmp_path / "store")
    save(store, tmp_path, env="env-one")
    bad = save(store, tmp_path, env="env-two")  # saved last: found first
    (bad / "meta.json").chmod(0o666)
    assert store.find("a" * 40, NODE).env_id == "env-one"


def test_a_directory_above_others_could_write_is_refused(tmp_path: Path) -> None:
    store = SavedCaches(tmp_path / "store")
    kept = save(store, tmp_path)
    kept.parent.chmod(0o777)
    with pytest.raises(Unusable, match="not private: .* writable by other users"):
        store.find("a" * 40, NODE)


def test_too_large_a_missing_record_or_a_foreign_meta_is_refused(tmp_path: Path,
                                                                  monkeypatch) -> None:
    store = SavedCaches(tmp_path / "store")
    kept = save(store, tmp_path)
    monkeypatch.setenv(MAX_GB_ENV, "0.00000005")  # ~54 bytes
    with pytest.raises(Unusable, match=f"raise {MAX_GB_ENV}"):
        store.find("a" * 40, NODE)
    monkeypatch.delenv(MAX_GB_ENV)
    meta = (kept / "meta.json").read_text()
    (kept / "meta.json").write_text(meta.replace(NODE, "tests/other.py::t"))
    with pytest.raises(Unusable, match="not of tests/test_net.py::test_net"):
        store.find("a" * 40, NODE)
    (kept / "meta.json").write_text("[" * 100000)
    with pytest.raises(Unusable, match="no readable meta.json"):
        store.find("a" * 40, NODE)
    (kept / "meta.json").write_text(meta)
    (kept / "phases" / "cold.json").unlink()
    with pytest.raises(Unusable, match="lack the cold phase's record"):
        store.find("a" * 40, NODE)


def test_a_kept_check_names_the_root_it_was_compiled_in_and_a_root_is_made_there(
        tmp_path: Path) -> None:
    """Inductor's entries name their Triton kernels by absolute path (their tuning results
    are looked up beside them): the deploy restores a copy into a root made at the path
    it was compiled in (controller/stored.find), never into one that exists there."""
    from pytest_compilecache import jsonfile
    from pytest_compilecache.isolation import CacheRoot

    store = SavedCaches(tmp_path / "store")
    dirs = a_root(tmp_path, "compilecache-test-net-abc")
    phases = dirs.pop("phases")
    kept = store.save(ENV, "a" * 40, NODE, dirs, phases, tmp_path / "compilecache-test-net-abc")
    found = store.find("a" * 40, NODE)
    assert found is not None and found.root == str(tmp_path / "compilecache-test-net-abc")
    with pytest.raises(FileExistsError):  # main's root still there: never taken over
        CacheRoot.create_at(Path(found.root))
    at = CacheRoot.create_at(tmp_path / "compilecache-test-net-new")
    assert all((at.path / d).is_dir() for d in ("inductor", "triton", "tmp", "phases"))
    assert at.tampered() is None and at.path.stat().st_mode & 0o077 == 0
    # a meta.json naming another kind of path, or none (an older copy): no root to move to
    for bad in ("relative/compilecache-x", "/etc/passwd", "/tmp/compilecache-x/../../etc", 7, None):
        meta = jsonfile.load(kept / "meta.json")
        (kept / "meta.json").write_text(__import__("json").dumps({**meta, "root": bad}))
        got = store.find("a" * 40, NODE)
        assert got is not None and got.root is None, bad


def test_a_root_at_another_runs_temp_path_makes_and_removes_the_dirs_above_it(
        tmp_path: Path) -> None:
    """main's roots were under its own CI run's temp dir (the Action's root names the run):
    the PR's run makes the missing dirs above the root, private, and removes them with it,
    leaving what was there before."""
    from pytest_compilecache.isolation import CacheRoot

    path = tmp_path / "compilecache-run-1" / "roots" / "compilecache-test-net-abc"
    at = CacheRoot.create_at(path)
    assert at.made_above == (path.parent, path.parent.parent)
    assert all(d.stat().st_mode & 0o077 == 0 for d in at.made_above)
    at.remove()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "shared").mkdir(mode=0o777)
    os.chmod(tmp_path / "shared", 0o777)  # others could swap what is made under it
    with pytest.raises(OSError, match="writable by other users"):
        CacheRoot.create_at(tmp_path / "shared" / "run" / "compilecache-test-net-abc")
    assert list((tmp_path / "shared").iterdir()) == []


def test_a_root_half_made_at_the_saved_path_leaves_nothing_to_block_the_next_deploy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_compilecache import isolation

    def full_disk(path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(isolation, "mark_owner", full_disk)
    with pytest.raises(OSError, match="No space"):
        isolation.CacheRoot.create_at(tmp_path / "run-1" / "compilecache-test-net-abc")
    assert list(tmp_path.iterdir()) == []
