"""Real checks whose warm run misses: a cache damaged between the phases. Also a failure
of the plugin's own output handling is an error that names its step, and a phase out of
memory says so. Key drift, noise within tolerance, another graph, a bypass with torch's
reason and a corrupted entry caught by the output comparison are judged on their real
records (tests/test_judges.py, tests/test_orchestrator.py)."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

CASE = '''
import pytest
import torch

from models import {model}
from pytest_compilecache import ModelCase


@pytest.fixture
def case():
    return ModelCase({model}(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def {name}(case):
    ...
'''

# A config value that differs per process, as one read from the clock or host would.
DRIFT_CONFTEST = '''
import pathlib

import torch

_count = pathlib.Path(__file__).with_name("processes")
n = int(_count.read_text()) if _count.exists() else 0
_count.write_text(str(n + 1))
torch._inductor.config.epilogue_fusion = n % 2 == 0
'''

# A custom post-grad pass that is not a CustomGraphPass with a uuid: caches bypass.
BYPASS_CONFTEST = '''
import torch


def my_pass(graph):
    return None


torch._inductor.config.post_grad_custom_post_pass = my_pass
'''

# Between cold and warm, edit the kernel source in every cached copy: the FX entry
# (same length, so the pickle stays valid) and the generated wrapper module, which a
# warm hit imports from disk. Every layer still hits; the numbers are wrong.
CORRUPT_CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    old, new = b"static_cast<float>(2.5)", b"static_cast<float>(3.5)"
    for f in (cache_root / "inductor").rglob("*"):
        if f.is_file() and f.suffix in ("", ".py") and old in f.read_bytes():
            f.write_bytes(f.read_bytes().replace(old, new))
'''


# The plugin's saved cold outputs damaged between the phases: its own machinery fails.
DAMAGED_OUTPUTS_CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    (cache_root / "phases" / "cold-outputs.pt").write_bytes(b"not a torch file")
'''

# Cold outputs moved by one part in a million, as a nondeterministic kernel would move
# them: warm no longer equals cold bitwise, but the difference is rounding noise.
NOISE_CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    import torch

    path = cache_root / "phases" / "cold-outputs.pt"
    outs = torch.load(path, weights_only=True)
    torch.save({k: v * (1 + 1e-6) if v.is_floating_point() else v for k, v in outs.items()},
               path)
'''


# Zero-byte shared objects left between build and deploy (a full disk, a concurrent
# wipe, an interrupted copy: pytorch issues 102539, 110933).
ZERO_SO_CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    for f in (cache_root / "inductor").rglob("*.so"):
        f.write_bytes(b"")
'''


# A phase whose address space is capped (as a CI runner's memory limit would) and a
# fixture that needs more: the phase runs out of memory.
LOW_MEMORY_CONFTEST = '''
import os
import resource

if os.environ.get("PYTEST_COMPILECACHE_CHILD"):  # only in the check's phase processes
    import torch  # noqa: F401  (its address space first, then the cap)

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
'''
HUNGRY_CASE = '''
import pytest
import torch

from models import MLP
from pytest_compilecache import ModelCase


@pytest.fixture
def case():
    return ModelCase(MLP(), example_inputs=(torch.ones(3 << 28),))  # 3 GiB


@pytest.mark.compile_cache
def test_hungry(case):
    ...
'''


# A constant drawn at import: every process traces another graph (the graph code
# differs), so the warm run misses and computes other numbers; no entry is stale.
CONSTANT_CASE = '''
import random

import pytest
import torch

from pytest_compilecache import ModelCase

SHIFT = random.random()


class Shifted(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + SHIFT


@pytest.fixture
def case():
    return ModelCase(Shifted(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_constant(case):
    ...
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    files = {}
    # key drift (DRIFT_CONFTEST), noise within tolerance (NOISE_CONFTEST), another graph
    # (CONSTANT_CASE), a bypass (BYPASS_CONFTEST) and a corrupt entry (CORRUPT_CONFTEST)
    # are judged on their real records (tests/test_judges.py, tests/test_orchestrator.py;
    # tests/data/records/record.py records them from these sources): not run here
    for sub, conftest, model, name in (("damaged", DAMAGED_OUTPUTS_CONFTEST, "MLP", "test_damaged"),
                                       ("zero_so", ZERO_SO_CONFTEST, "MLP", "test_zero_so")):
        files[f"{sub}/conftest.py"] = conftest
        files[f"{sub}/{name}.py"] = CASE.format(model=model, name=name)
    files["low_memory/conftest.py"] = LOW_MEMORY_CONFTEST
    files["low_memory/test_hungry.py"] = HUNGRY_CASE
    return run_repo(tmp_path_factory.mktemp("repo_miss"), files)


def test_an_error_in_the_plugins_output_handling_names_the_step(run: RepoRun) -> None:
    c = run.check("test_damaged")
    assert c["verdict"] == "error", run.out[-3000:]
    assert "pytest-compilecache failed while loading the cold phase's outputs" in c["error"]
    assert "not in the model under check" in c["error"]
    assert "Traceback" in c["error"]
    assert not c["problems"] and not c["notes"]  # no diagnosis of the model


def test_a_cache_damaged_between_build_and_deploy_is_named(run: RepoRun) -> None:
    c = run.check("test_zero_so")
    assert c["verdict"] == "fail", run.out[-3000:]
    first = c["problems"][0]
    assert first.startswith("cache damaged between build and deploy"), c["problems"]
    assert ".so: 0 bytes, cold wrote" in first and "KB" in first
    assert "cache damaged between build and deploy" in run.out


def test_a_phase_out_of_memory_says_so_with_its_peak(run: RepoRun) -> None:
    c = run.check("test_hungry")
    assert c["verdict"] == "error", run.out[-3000:]
    assert c["error"].startswith("cold phase ran out of memory (can't allocate memory; "
                                 "peak resident memory "), c["error"][:300]
    t = run.check("test_zero_so")["timings"]  # every phase's peak is in the report
    assert t["cold_peak_rss_mb"] > 100 and t["warm_peak_rss_mb"] > 100
