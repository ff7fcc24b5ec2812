"""The remote path (--compile-cache-via=remote) against a real redis-server: a round trip
through the plugin's private server, and a user's server that dies or is emptied
between the cold and the warm process (real CPU compiles, torch 2.13)."""
from __future__ import annotations

import importlib.util
import shutil
from typing import Iterator

import pytest

from conftest import RepoRun, run_repo
from pytest_compilecache.paths.redis_server import RedisServer, alive

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="no redis-server (.ci/run installs Debian's package)"),
              pytest.mark.skipif(importlib.util.find_spec("redis") is None,
                                 reason="no redis client for torch's remote caches: "
                                        "pip install -e '.[dev]' (or pip install redis)")]


def _tests(*widths: int) -> str:
    """A Linear per test, each of another width: their cache keys differ, so one check's
    entries on a shared server never warm another's cold run."""
    out = "import pytest\nimport torch\n\nfrom pytest_compilecache import ModelCase\n"
    for w in widths:
        out += f'''

@pytest.fixture
def linear{w}():
    return ModelCase(torch.nn.Linear(16, {w}), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_linear{w}(linear{w}):
    ...
'''
    return out


# between the phases: the user's server is emptied (test_linear5) or shut down (test_linear6)
CONFTEST = '''
import os
import socket


def _say(*words):
    host, port = os.environ["TEST_REDIS"].split(":")
    req = "*%d\\r\\n" % len(words) + "".join("$%d\\r\\n%s\\r\\n" % (len(w), w) for w in words)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(req.encode())
        s.recv(100)


def pytest_compilecache_between_phases(item, cache_root):
    if item.name == "test_linear5":
        _say("FLUSHALL")
    if item.name == "test_linear6":
        _say("SHUTDOWN", "NOSAVE")
'''


# a test body (nothing compiles) whose warm phase shuts the plugin's private server down,
# after test_linear4 has used it
DIES_IN_WARM = '''

@pytest.mark.compile_cache
def test_dies_in_warm(compile_cache):
    if compile_cache.phase == "warm":
        import os
        import socket

        with socket.create_connection((os.environ["TORCHINDUCTOR_REDIS_HOST"],
                                       int(os.environ["TORCHINDUCTOR_REDIS_PORT"]))) as s:
            s.sendall(b"*2\\r\\n$8\\r\\nSHUTDOWN\\r\\n$6\\r\\nNOSAVE\\r\\n")
            s.recv(100)
'''


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    return run_repo(tmp_path_factory.mktemp("repo_remote"),
                    {"test_remote.py": _tests(4) + DIES_IN_WARM}, "--compile-cache-via=remote")


@pytest.fixture(scope="module")
def users_server() -> Iterator[RedisServer]:
    server = RedisServer.start()
    yield server
    server.close()


# a second check of test_linear7's model, after it: its cold run finds on the user's
# server the entries test_linear7 put there, as a later run of the same tests would
AGAIN = '''

@pytest.mark.compile_cache
def test_linear7_again(linear7):
    ...
'''


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, users_server: RedisServer) -> RepoRun:
    """One session over the user's server: test_linear5, test_linear7 and its twin, then
    test_linear6 shuts the server down, and test_linear8 runs after."""
    tests = _tests(5, 7, 6, 8)
    seven = "def test_linear7(linear7):\n    ...\n"
    assert tests.count(seven) == 1
    return run_repo(tmp_path_factory.mktemp("repo_remote_users"),
                    {"test_remote.py": tests.replace(seven, seven + AGAIN),
                     "conftest.py": CONFTEST},
                    "--compile-cache-via=remote", f"--compile-cache-redis={users_server.address}",
                    env={"TEST_REDIS": users_server.address})


def _check(run: RepoRun, name: str) -> dict:
    [c] = [c for c in run.report["checks"] if c["nodeid"].endswith(f"::{name}")]
    return c


def test_a_new_machine_starts_warm_from_redis(private: RepoRun) -> None:
    c = _check(private, "test_linear4")
    assert c["verdict"] == "pass", private.out[-3000:]
    assert c["via"] == "remote"
    notes = "\n".join(c["notes"])
    # the warm process's local disk was empty: both layers came through the server
    assert "remote fx_graph (RemoteFxGraphCache): cold put 1; warm hit 1, miss 0 " \
           "(its empty local disk: miss 1)" in notes, notes
    assert "remote aot_autograd (RemoteAOTAutogradCache): cold put 1; warm hit 1" in notes
    assert c["layers"]["fx_graph"]["state"] == "hit"
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]
    # the plugin's own server: started for the session, stopped with it
    [port] = [n.split("127.0.0.1:")[1].split(";")[0] for n in c["notes"]
              if "a private redis-server at 127.0.0.1:" in n]
    assert not alive("127.0.0.1", int(port))


def test_a_server_that_dies_in_the_warm_phase_is_its_error(private: RepoRun) -> None:
    """torch's client reads the refused connections as misses: the check is the
    server's `error`, never a `fail` (issue 38)."""
    c = _check(private, "test_dies_in_warm")
    assert c["verdict"] == "error", private.out[-3000:]
    assert c["problems"][0].startswith("remote: the plugin's private redis-server at "
                                       "127.0.0.1:"), c["problems"]
    assert "stopped answering during the warm phase (DBSIZE got no reply): a fault of the " \
           "server, not a verdict on the model" in c["problems"][0], c["problems"]


def test_an_emptied_server_is_named_as_remote_misses(shared: RepoRun) -> None:
    c = _check(shared, "test_linear5")
    assert c["verdict"] == "fail"
    assert ("remote fx_graph: the warm process missed RemoteFxGraphCache 1 time(s) and hit "
            "it never, though the cold one put 1 entr(ies)") in c["problems"], c["problems"]
    assert any("your Redis server at" in n and "may have warmed the cold run" in n
               for n in c["notes"])


def test_a_server_that_dies_between_phases_is_the_servers_error(shared: RepoRun) -> None:
    """The user's server shut down after the cold phase: torch's client reads a refused
    connection as a miss, so the check failed, its layer lines blaming 'a corrupt or
    unreadable entry' (issue 38). It is an `error` naming the server; no warm phase runs."""
    c = _check(shared, "test_linear6")
    assert c["verdict"] == "error", shared.out[-3000:]
    assert c["error"].startswith(
        "warm phase was not run: your Redis server (--compile-cache-redis) at 127.0.0.1:"), \
        c["error"]
    assert "stopped answering after the cold phase, before the warm phase (Connection " \
           "refused): a fault of the server, not a verdict on the model; restart it" \
           in c["error"], c["error"]
    assert "warm_process_s" not in c["timings"]


def test_a_check_after_the_server_died_is_an_error_without_a_compile(shared: RepoRun) -> None:
    """The next check of the session: nothing compiles against a dead server."""
    c = _check(shared, "test_linear8")
    assert c["verdict"] == "error", shared.out[-3000:]
    assert c["error"].startswith("cold phase was not run: your Redis server "
                                 "(--compile-cache-redis) at 127.0.0.1:"), c["error"]
    assert "stopped answering before the check's cold phase (Connection refused)" in c["error"]
    assert "cold_process_s" not in c["timings"]
    assert "Traceback" not in shared.out


def test_without_a_server_the_remote_path_is_a_usage_error(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv("PATH", str(pytester.path))  # no redis-server on it
    result = pytester.runpytest_subprocess("--compile-cache-check", "--compile-cache-via=remote")
    result.stderr.fnmatch_lines(["*no redis-server on PATH*apt-get install redis-server*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_cold_run_your_server_warmed_is_not_cold(shared: RepoRun,
                                                  users_server: RedisServer) -> None:
    """A server of the user's keeps the entries of earlier runs: the cold process of a
    later check of the same model hits them. It passed before (a note said the server
    'may have warmed the cold run'); a cold run that hits is never a pass (issue 30)."""
    assert _check(shared, "test_linear7")["verdict"] == "pass", shared.out[-3000:]
    c = _check(shared, "test_linear7_again")
    assert c["verdict"] == "error", shared.out[-3000:]
    assert c["error"].startswith("cold phase was not cold: it began on an empty private cache "
                                 "root and still loaded cache entries (fx_graph hit 1 entr(ies) "
                                 "this process never wrote"), c["error"]
    assert f"your Redis server at {users_server.address}: it holds entries of earlier runs" \
        in c["error"]
