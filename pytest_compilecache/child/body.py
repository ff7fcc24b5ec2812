"""The test-body form of a check, in the phase child: the body itself is the workload
(every compiled callable it calls is recorded), then it runs again under force_eager for
the reference, under another seed for the random tensors, and in float64."""
from __future__ import annotations

import traceback
from typing import Any, Dict, List, Optional

import pytest

from pytest_compilecache.child import float64, randomness
from pytest_compilecache.child import workload as wl
from pytest_compilecache.child.case import References
from pytest_compilecache.child.phase import (ChildPlugin, compile_kwargs, first_line,
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
        self.rng_at_start = randomness.rng_state()  # the eager re-runs start here too
        with o.path.watching(o.artifact, o.device or "cpu"):
            skip = o.path_not_applicable(None)
            o.recorder.reset()
            o.recorder.active = True
            # each compiled call draws from its own seed and leaves the generator as it
            # found it, as in the eager re-runs: draws outside compiled calls (a fresh
            # input after a dropout step) are then the same in every run
            o.recorder.reseed = randomness.REFERENCE_SEED
            try:
                with o.workload(load=not skip):
                    if skip or o.artifact.get("error"):  # the body is not run
                        skip = o.result["ran"] = o._skip_body = True
                    res = yield
            finally:
                o.recorder.active = False
                o.recorder.reseed = None
                o._skip_body = False
            if skip:
                return res
            o.result["ran"] = True
            o.save_artifact()
        compiled = dict(o.recorder.outputs)
        o._finish(compiled, *self._references(pyfuncitem))
        return res

    def _references(self, pyfuncitem: pytest.Function) -> References:
        """The body again under force_eager (and under another seed: the random
        tensors), then in float64."""
        o = self.owner
        o._eager_pass = True
        note = ref_note = None
        eager: wl.Outputs = {}
        ref: Optional[wl.Outputs] = None
        random: List[Dict[str, Any]] = []
        try:
            with wl.force_eager() as why:
                note = why
                if why is None:
                    eager = self._rerun(pyfuncitem, randomness.REFERENCE_SEED)
                    random = o.random_tensors(lambda seed: self._rerun(pyfuncitem, seed), eager)
                    try:
                        with float64.make_mode():
                            ref = self._rerun(pyfuncitem, randomness.REFERENCE_SEED)
                    except Exception as e:
                        ref_note = "the test body failed in float64: " + first_line(e)
        except Exception:
            note = ("the test body failed when re-run under force_eager:\n"
                    + traceback.format_exc(limit=3))
        finally:
            o._eager_pass = False
            o.recorder.active = False
            o.recorder.reseed = None
        if ref is not None and not ref:
            ref, ref_note = None, "the test body recorded nothing in float64"
        return eager, note, ref, ref_note, random

    def _rerun(self, pyfuncitem: pytest.Function, seed: int) -> wl.Outputs:
        """The body once more, from the random state it started with, recording what
        it computes; the random draws inside each compiled call come from `seed`."""
        o = self.owner
        o.recorder.reset()
        o.recorder.active = True
        o.recorder.reseed = seed
        randomness.set_rng_state(self.rng_at_start)
        try:
            pyfuncitem.ihook.pytest_pyfunc_call(pyfuncitem=pyfuncitem)
        finally:
            o.recorder.active = False
        return dict(o.recorder.outputs)
