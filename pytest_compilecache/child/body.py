"""The test-body form of a check, in the phase child: the body itself is the workload
(every compiled callable it calls is recorded, the random states it had at each call
observed), then it runs again under force_eager for the reference, with other draws
inside its compiled calls for the random tensors, and in float64, each re-run replaying
the compiled run's random states (`replay`)."""
from __future__ import annotations

import functools
from typing import Any, Dict, Optional, Set

import pytest

from pytest_compilecache.child import amp, amplify, float64, randomness, replay
from pytest_compilecache.child import workload as wl
from pytest_compilecache.child.failures import first_line, where_in_test
from pytest_compilecache.child.phase import (ChildPlugin, References, compile_kwargs,
                                             model_cases)


class BodyHooks:
    """Test-body form: the body is the workload; every compiled callable is recorded,
    then the body runs again under force_eager for the reference, and once more in
    float64 (under float64.make_mode) for the accuracy rule. A separate
    object because one plugin cannot implement the same hook twice."""

    def __init__(self, owner: ChildPlugin) -> None:
        self.owner = owner

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Any:
        o = self.owner
        if o._eager_pass or pyfuncitem.nodeid != o.spec["nodeid"] or model_cases(pyfuncitem):
            return (yield)
        o.result["form"] = "test_body"
        if compile_kwargs(pyfuncitem):
            o.result["notes"] = [f"the marker's torch.compile arguments "
                                 f"({', '.join(compile_kwargs(pyfuncitem))}) were not used: "
                                 f"they apply to a ModelCase, and this test body calls "
                                 f"torch.compile itself"]
        if o.result["error"]:
            raise RuntimeError(o.result["error"])
        # the re-runs start from the random state the compiled run started with, and
        # replay the states it had at each outermost compiled call (`replay`)
        self.at_start = replay.capture()
        observe = replay.Observe()
        with o.path.watching(o.artifact, o.device or "cpu"):
            skip = o.path_not_applicable(None)
            o.recorder.reset()
            o.recorder.active = True
            o.recorder.calls = observe  # reads the generators, changes nothing
            try:
                with o.workload(load=not skip):
                    if skip or o.artifact.get("error"):  # the body is not run
                        skip = o.result["ran"] = o._skip_body = True
                    res = yield
            finally:
                o.recorder.active = False
                o.recorder.calls = None
                o._skip_body = False
            if skip:
                return res
            o.result["ran"] = True
            o.result["rng_trail"] = observe.digests()
            o.result["compiled_calls"] = o.recorder.entered
            self.trail, self.inputs = observe.trail, observe.inputs
            o.save_artifact()
        compiled = dict(o.recorder.outputs)
        o.finish(compiled, lambda: self._references(pyfuncitem))
        return res

    def _references(self, pyfuncitem: pytest.Function) -> References:
        """The body again under force_eager (and with other draws inside its compiled
        calls: the random tensors), then in float64; every state outside the calls as
        the compiled run had it."""
        o = self.owner
        o._eager_pass = True
        refs = References({})
        try:
            with wl.force_eager() as why:
                refs.eager_note = why
                if why is None:
                    with amp.watch(o.device) as seen:  # autocast's dtype, GradScaler's skips
                        reference = replay.Replay(self.trail, watch=self.inputs,
                                                  on_enter=seen.sample)
                        refs.eager = self._rerun(pyfuncitem, reference)
                    refs.work_dtype = seen.dtype
                    if reference.parted:
                        o.result["eager_parted"] = reference.parted
                    refs.random = o.random_tensors(
                        lambda seed: self._rerun(pyfuncitem, self._replay(seed)), refs.eager)
                    try:
                        with float64.make_mode(found_inf=seen.found_inf):
                            refs.ref = self._rerun(pyfuncitem, replay.Replay(self.trail))
                    except Exception as e:
                        refs.ref_note = "the test body failed in float64: " + first_line(e)
                    if self.trail:
                        refs.amplify = functools.partial(self._amplified, pyfuncitem,
                                                         {r["name"] for r in refs.random},
                                                         refs.work_dtype)
        except Exception as e:
            refs.eager_note = eager_failed(e, pyfuncitem)
        finally:
            o._eager_pass = False
            o.recorder.active = False
            o.recorder.calls = None
        if refs.ref is not None and not refs.ref:
            refs.ref, refs.ref_note = None, "the test body recorded nothing in float64"
        return refs

    def _replay(self, seed: int) -> replay.Replay:
        """The reference's replay, or the probe's (its own draws inside each call)."""
        return replay.Replay(self.trail, None if seed == randomness.REFERENCE_SEED else seed)

    def _amplified(self, pyfuncitem: pytest.Function, random: Set[str], work_dtype: Any,
                   compiled: wl.Outputs, eager: wl.Outputs, ref: Optional[wl.Outputs]
                   ) -> Dict[str, float]:
        """The body once more under force_eager, each call's outputs perturbed by its
        own rounding's size (`amplify`): how far each later value moves."""
        o = self.owner
        rel = amplify.sizes(compiled, eager, ref, random, work_dtype)
        o._eager_pass = True
        try:
            with wl.force_eager(), amplify.counting_steps(o.recorder):
                perturbed = self._rerun(pyfuncitem,
                                        replay.Replay(self.trail, perturb=amplify.Perturb(rel)))
        except Exception as e:  # the body's own assert on perturbed values: no allowance
            o.result.setdefault("notes", []).append(
                "the rounding earlier steps amplify was not measured: "
                + eager_failed(e, pyfuncitem).split(";")[0])
            return {}
        finally:
            o._eager_pass = False
            o.recorder.calls = None
        return amplify.allowance(eager, perturbed, o.recorder.later)

    def _rerun(self, pyfuncitem: pytest.Function, calls: replay.Replay) -> wl.Outputs:
        """The body once more, from the random state it started with, recording what
        it computes, `calls` setting the states at each compiled call."""
        o = self.owner
        o.recorder.reset()
        o.recorder.active = True
        o.recorder.calls = calls
        replay.restore(self.at_start)
        try:
            pyfuncitem.ihook.pytest_pyfunc_call(pyfuncitem=pyfuncitem)
        finally:
            o.recorder.active = False
        return dict(o.recorder.outputs)


def eager_failed(e: BaseException, pyfuncitem: pytest.Function) -> str:
    """One line: where in the test's own code the eager re-run failed, and what that
    usually means (a body that asserts on what only a compile produces)."""
    where = where_in_test(e, str(pyfuncitem.path))
    return (f"the test body failed when re-run eagerly (torch.compiler.set_stance"
            f"('force_eager')){where}: {first_line(e)}; a body that asserts on what only a "
            f"compile produces (torch._dynamo.explain, graph-break or compile counts) cannot "
            f"be re-run eagerly, so its compiled outputs were not compared with eager")
