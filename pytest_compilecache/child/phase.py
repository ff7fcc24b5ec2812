"""The pytest plugin object active inside a phase's child process.

The child is a pytest session of one node id, so the user's fixtures and conftest
build the model here, never in the controller. It observes the caches around the
compiled workload, runs the eager reference and writes one JSON result file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

import pytest

from pytest_compilecache.child import bits, calls, coldcompare, compare, where
from pytest_compilecache.child import confinement
from pytest_compilecache.child.exit import exit_now, stack_before_timeout
from pytest_compilecache.child.failures import first_line, probe_failed
from pytest_compilecache.child import randomness, replay
from pytest_compilecache.paths.base import WarmStartPath
from pytest_compilecache.child import workload as wl
from pytest_compilecache.case import ModelCase
from pytest_compilecache.files import write_json_atomic
from pytest_compilecache.isolation import IMPORTS_OUT_ENV, job_id_from_env
from pytest_compilecache.terms import CHECK_KWARGS
from pytest_compilecache.wire import WIRE_VERSION, PhaseSpec
from pytest_compilecache.child.probe import CacheObserver, current_job_id


class InternalError(Exception):
    """A step of the plugin's own machinery failed; the check is an error naming it."""


@dataclasses.dataclass
class References:
    """What a form's reference runs made, for the comparisons (`ChildPlugin._finish`):
    the eager outputs (or why none), the float64 ones (or why none), the tensors that
    change with the seed, and, where later values may carry amplified rounding, how to
    measure it (`amplify`: a perturbed eager run, made only when a comparison needs it)."""
    eager: wl.Outputs
    eager_note: Optional[str] = None
    ref: Optional[wl.Outputs] = None
    ref_note: Optional[str] = None
    random: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    amplify: Optional[Callable[[wl.Outputs, wl.Outputs, Optional[wl.Outputs]],
                               Dict[str, float]]] = None
    work_dtype: Any = None  # the half type an autocast ran the work in (`amp.watch`)


class ChildPlugin:
    """The phase's record and the steps both forms share; the forms' own hooks are
    child/case.py (a ModelCase) and child/body.py (a test body)."""

    def __init__(self, spec: PhaseSpec, path: WarmStartPath) -> None:
        self.spec = spec
        self.recorder = wl.Recorder()
        self.observer = CacheObserver()
        self.device: Optional[str] = None
        self._eager_pass = False
        self._skip_body = False  # the path cannot take a test body, or failed before it
        self._unpatch: Optional[Callable[[], None]] = None
        self.result: Dict[str, Any] = {"wire_version": WIRE_VERSION,
                                       "phase": spec["phase"], "nodeid": spec["nodeid"],
                                       "error": None, "ran": False}
        # wall-clock instants of the process's stages, for the session's time breakdown
        self.marks: Dict[str, float] = {}
        self.result["marks"] = self.marks
        # the job id this process started with; the test or model may set another in code
        self._job_at_start = job_id_from_env(os.environ)
        # the warm-start path checked, and what it saved or loaded
        self.path = path
        self.artifact_path = Path(spec.get("artifact_path") or os.devnull)
        self.artifact: Dict[str, Any] = {}
        if spec.get("artifact"):
            self.result["artifact"] = self.artifact
        # forked by the preloaded launcher: where to list what this phase imports
        self._imports_out = os.environ.pop(IMPORTS_OUT_ENV, None)
        self._modules_before = set(sys.modules)
        self._seeded: Optional[replay.State] = None  # the generators as seeded for the test
        self._modules_at_seed: Set[str] = set()  # what was imported when they were seeded

    def mark(self, stage: str) -> None:
        self.marks.setdefault(stage, time.time())

    def tell_imports(self) -> None:
        """Once the model is built: the installed modules this phase imported (its
        library's model classes, imported lazily), for the preloaded interpreters to
        import before their next fork. Only speed depends on it."""
        out, self._imports_out = self._imports_out, None
        if out:
            from pytest_compilecache.launch.libraries import installed_modules

            with contextlib.suppress(Exception):
                write_json_atomic(Path(out), installed_modules(sys.modules, self._modules_before))

    # -- setup ---------------------------------------------------------------------
    def configure(self) -> None:
        import torch

        # identical torch generators in both phases from the start (Python's random and
        # numpy's are seeded before the test, `replay.seed_all`: what a module draws at
        # import, and the hash seed, stay as a restart leaves them, as in production)
        torch.manual_seed(int(self.spec.get("seed", 0)))
        stack_before_timeout(self.spec.get("timeout_s", 0.0))
        self.result["versions"] = wl.versions()
        try:
            self.device = wl.resolve_device(self.spec.get("device", "auto"))
        except RuntimeError as e:
            self.result["error"] = str(e)
            return
        self.result["device"] = self.device
        if self.device == "cuda":
            if self.spec.get("cuda_index"):  # --compile-cache-warm-on-other-gpu
                torch.cuda.set_device(int(self.spec["cuda_index"]))
            self.result["device_name"] = torch.cuda.get_device_name()
            self.result["cuda_index"] = torch.cuda.current_device()
            # which physical GPU that is (--compile-cache-warm-on-other-gpu=pinned: each
            # phase's cuda:0 is another one)
            self.result["cuda_visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._unpatch = calls.observe_compiled_calls(self.recorder)
        self.mark("configured")

    def _job_id(self) -> Dict[str, Any]:
        """The PGO job id in effect at the end of the phase, and where it came from."""
        value = current_job_id()
        source = self.spec.get("job_id_source", "none")
        if value != self._job_at_start:
            source = "set in code (torch.compiler.config.job_id)" if value else "unset in code"
        return {"value": value, "source": source}

    def context(self) -> wl.CheckContext:
        return wl.CheckContext(self.device or "cpu", self.spec["phase"], self.recorder)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the test's fixtures, in both phases: torch's, Python's and numpy's
        generators from the check's seed, once (`replay`)."""
        if item.nodeid == self.spec["nodeid"]:
            replay.seed_all(int(self.spec.get("seed", 0)), self.spec.get("python_seed"))
            self._seeded = replay.capture()
            self._modules_at_seed = set(sys.modules)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: List[pytest.Item]) -> None:
        keep = [i for i in items if i.nodeid == self.spec["nodeid"]]
        drop = [i for i in items if i.nodeid != self.spec["nodeid"]]
        items[:] = keep
        if drop:
            config.hook.pytest_deselected(items=drop)
        self.mark("collected")

    # -- the warm-start path (--compile-cache-via) -----------------------------------
    def path_not_applicable(self, case: Optional[ModelCase]) -> bool:
        """Record why this path cannot take the workload; the phase then runs nothing."""
        why = self.path.not_applicable(self.result.get("form") or "", case)
        if why:
            self.artifact["na"] = why
            self.result["ran"] = True
        return bool(why)

    def load_artifact(self) -> None:
        """The warm process loads what the cold one saved, into its empty cache root, and
        lists what is in place, so that what the run builds after it can be told apart."""
        if self.spec.get("artifact") != "load":
            return
        from pytest_compilecache import files as fs

        self.path.before(self.spec["phase"], self.artifact_path, self.artifact)
        self.artifact["watched"] = self.spec["watched"]
        with self.step("listing the cache files after loading the artifact"):
            self.artifact["files"] = fs.snapshot(
                {k: Path(v) for k, v in self.spec["watched"].items()})

    def save_artifact(self) -> None:
        """After the workload: the cold process saves; either records what it did."""
        if self.spec.get("artifact"):
            with self.step(f"recording the {self.path.via} path after the workload"):
                self.path.after(self.spec["phase"], self.artifact_path, self.artifact)

    # -- the check -----------------------------------------------------------------
    @contextlib.contextmanager
    def workload(self, load: bool = True) -> Iterator[None]:
        """What both forms do around the user's workload: the check's private cache
        settings put back, the cache observers on, the warm process's artifact loaded;
        after it, the observers off and the cache dirs verified. An exception in it is
        the phase's error."""
        self.reclaim_cache_settings()
        with self.step("starting the cache observers"):
            self.observer.start()  # imports torch._dynamo: part of setup, not the workload
        self.mark("workload_start")  # a warm start begins with loading the artifact
        try:
            if load:
                self.load_artifact()
            yield
        except BaseException:
            self.result["error"] = traceback.format_exc()
            raise
        finally:
            self.mark("workload_end")
            if self._seeded is not None:  # the reseeded restart's cue (`replay`)
                self.result["drew"] = replay.moved(self._seeded)
                self.result["imported_after_seed"] = self._imported_after_seed()
            self.observer.stop()
            self.check_confined("after the workload")

    def _imported_after_seed(self) -> List[str]:
        """The installed libraries the test imported after the seed (lazily, in a
        fixture or the body): a draw seen here may be their import's, not the test's
        (judge/reseeded.drew_in_the_test)."""
        from pytest_compilecache.launch.libraries import installed_modules

        try:  # a lazy module's __getattr__ may raise anything: then unknown, never none
            new = installed_modules(sys.modules, self._modules_at_seed)
        except Exception:
            return ["?"]
        return sorted({name.split(".")[0] for name in new})

    def random_tensors(self, run: Callable[[int], wl.Outputs], eager: wl.Outputs
                       ) -> List[Dict[str, Any]]:
        """The eager reference again under another seed (and, where that changed
        something, under its own seed once more, for the run-to-run noise): the tensors
        that move with the seed are random (`randomness.seed_dependent`)."""
        self.mark("random_probe_start")
        try:
            probe = run(randomness.PROBE_SEED)
            with where.comparing(self.device):
                changed = any(not bits.same_bits(t, probe[n])
                              for n, t in eager.items() if n in probe)
            again = run(randomness.REFERENCE_SEED) if changed else None
            with where.comparing(self.device):
                return randomness.seed_dependent(eager, probe, again)
        except Exception as e:
            self.result["random_note"] = probe_failed(e, self.spec["nodeid"].split("::")[0])
            return []
        finally:
            self.mark("random_probe_end")

    def _original_compile(self) -> Any:
        import torch

        return torch.compile

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        """A step of our own machinery: a failure is an error naming it, with the
        traceback, never a verdict on the user's model."""
        try:
            yield
        except Exception as e:
            if not self.result.get("internal_step"):
                self.result["internal_step"] = what
                self.result["error"] = (f"pytest-compilecache failed while {what} (an error in "
                                        f"the plugin, not in the model under check):\n"
                                        + traceback.format_exc())
            raise InternalError(what) from e

    def finish(self, compiled: wl.Outputs, references: Callable[[], References]) -> None:
        """After the workload: the references and the comparisons, where the path's rule
        reads outputs; a recording of keys reads none, so it makes no eager, seed-probe
        or float64 re-run (they would cost as much as the workload again); nor does a
        restart under other Python-side draws (`replay`), whose outputs follow them."""
        if self.path.compares_outputs and self.spec.get("python_seed") is None:
            self._finish(compiled, references())
            return
        try:
            with self.step("describing the compiled outputs"):
                self.result["outputs"] = bits.describe(compiled)
        except InternalError:
            pass  # recorded in self.result; the session reports the check as an error
        self.mark("compared")

    def _finish(self, compiled: wl.Outputs, refs: References) -> None:
        self.mark("eager_end")
        try:
            with where.comparing(self.device):
                self._compare_eager(compiled, refs)
            if self._amplified_needed(refs):
                self.mark("amplify_start")
                with self.step("measuring the rounding that earlier steps amplify"):
                    allowed = refs.amplify(compiled, refs.eager, refs.ref)  # type: ignore[misc]
                with where.comparing(self.device):
                    self._compare_eager(compiled, refs, allowed)
            with where.comparing(self.device):
                self._compare_cold(compiled, refs)
        except InternalError:
            pass  # recorded in self.result; the session reports the check as an error
        self.mark("compared")

    def _amplified_needed(self, refs: References) -> bool:
        """Only a failed eager comparison asks for the perturbed run: a tensor that
        failed may carry rounding that earlier steps amplified."""
        cmp = self.result.get("compare_eager") or {}
        return (refs.amplify is not None and cmp.get("ok") is False
                and not self.spec.get("eager_tolerance"))

    def _compare_eager(self, compiled: wl.Outputs, refs: References,
                       amplified: Optional[Dict[str, float]] = None) -> None:
        with self.step("describing the compiled outputs"):
            self.result["outputs"] = bits.describe(compiled)
        eager_note = refs.eager_note
        calls = (_calls(compiled), _calls(refs.eager))
        if not eager_note and calls[0] != calls[1]:
            eager_note = (f"the eager re-run of the test body made other compiled calls than the "
                          f"compiled run (compiled: {', '.join(calls[0][:4]) or 'none'}; eager: "
                          f"{', '.join(calls[1][:4]) or 'none'}), so their outputs do not line up")
        if eager_note:
            self.result["compare_eager"] = {"ok": None, "note": eager_note}
            return
        tol = self.spec.get("eager_tolerance")
        with self.step("comparing compiled outputs with eager ones"):
            self.result["compare_eager"] = compare.compare_with_eager(
                compiled, refs.eager, refs.ref, refs.ref_note, tuple(tol) if tol else None,
                refs.random, amplified=amplified, work_dtype=refs.work_dtype)

    def _compare_cold(self, compiled: wl.Outputs, refs: References) -> None:
        # the cold phase keeps its outputs for the warm one; a scenario may name others
        # (the deploy scenario's warm outputs, for a fresh compile of this commit's code)
        phase, cold = self.spec["phase"], self.spec["cold_outputs"]
        keep = self.spec.get("save_outputs") or (cold if phase == "cold" else None)
        against = self.spec.get("compare_outputs") or (cold if phase != "cold" else None)
        if keep:
            with self.step(f"saving the {phase} outputs"):
                wl.save_outputs(compiled, keep)
        if against and os.path.exists(against):
            which = (Path(against).name.split("-outputs")[0] if self.spec.get("compare_outputs")
                     else "cold")
            with self.step(f"loading the {which} phase's outputs"):
                earlier = wl.load_outputs(against)
            tol = self.spec.get("tolerance")
            with self.step(f"comparing {phase} outputs with earlier ones"):
                self.result["compare_cold"] = coldcompare.compare_with_cold(
                    compiled, earlier, tuple(tol) if tol else None, refs.ref,
                    {r["name"] for r in refs.random}, labels=(phase, which))

    # -- the private cache root (confinement.py) ------------------------------------
    def reclaim_cache_settings(self) -> None:
        """Before the workload: the private cache settings the test's code changed
        since the phase started (a conftest's team cache, a cleared environment), put
        back, and said."""
        said = confinement.reclaim(self.spec.get("private") or {})
        self.result.setdefault("reclaimed", []).extend(said)

    def check_confined(self, when: str) -> None:
        """After the user's code ran: torch's and Triton's cache dirs are in the root
        (the temp dir outside it is a note: what torch keeps there is in no key)."""
        if not self.spec.get("root") or self.result.get("escaped"):
            return
        try:
            found = confinement.escapes(self.spec["root"], self.spec.get("private") or {}, when)
        except Exception as e:  # our own machinery: said, never a verdict on the model
            found = [("tmp", f"could not tell where the caches were {when}: {first_line(e)}")]
        self.result["escaped"] = [text for label, text in found if label != "tmp"]
        notes = self.result.setdefault("reclaimed", [])
        notes += [text for label, text in found if label == "tmp" and text not in notes]

    # -- reporting -----------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._unpatch:
            self._unpatch()
        self.check_confined("when the phase ended")
        if not self.result["ran"] and not self.result["error"]:
            self.result["error"] = (f"the check did not run in the {self.spec['phase']} process: "
                                    f"node id {self.spec['nodeid']!r} was not collected or its "
                                    f"setup failed (see the log below)")
        self.result["job_id"] = self._job_id()
        self.result["cache"] = None
        if self.observer.stopped:
            try:
                with self.step("snapshotting the cache events"):
                    self.result["cache"] = self.observer.record()
            except InternalError:
                pass
        if self.artifact:  # a path that saves or loads nothing may still say something
            self.result["artifact"] = self.artifact
        self.mark("written")
        write_json_atomic(Path(self.spec["out"]), self.result)
        self.tell_imports()  # a test body builds its model in the workload
        if self.result["ran"] and not self.result["error"]:
            exit_now(int(exitstatus))


def _calls(outputs: wl.Outputs) -> List[str]:
    """The compiled calls a test body recorded, in order ("call0:fn")."""
    return list(dict.fromkeys(n.split(":", 1)[0] + ":" + n.split(":", 1)[1].split("[")[0]
                              .split(".")[0] for n in outputs if n.startswith("call")))


def model_cases(item: pytest.Function) -> List[ModelCase]:
    funcargs = getattr(item, "funcargs", {}) or {}
    return [v for v in funcargs.values() if isinstance(v, ModelCase)]


def compile_kwargs(item: pytest.Item) -> Dict[str, Any]:
    marker = item.get_closest_marker("compile_cache")
    return {k: v for k, v in marker.kwargs.items() if k not in CHECK_KWARGS} if marker else {}


def load_spec(path: str) -> PhaseSpec:
    """What the controller wrote for this phase (controller/check.py)."""
    with open(path) as f:
        spec: PhaseSpec = json.load(f)
    return spec
