"""The ModelCase form of a check, in the phase child: each case is compiled the path's
way and run once (the workload), then run eagerly for the reference, under another seed
for the random tensors, and in float64."""
from __future__ import annotations

import traceback
from typing import Any, Dict, List, Optional

import pytest

from pytest_compilecache import lifetime
from pytest_compilecache.child import float64, randomness
from pytest_compilecache.child import workload as wl
from pytest_compilecache.child.phase import (ChildPlugin, References, compile_kwargs,
                                             first_line, model_cases)
from pytest_compilecache.paths.base import ArtifactFailed, NotApplicable


class CaseHooks:
    """ModelCase form: a separate object beside the test-body form's (child/body.py),
    both over the one ChildPlugin that owns the phase's record."""

    def __init__(self, owner: ChildPlugin) -> None:
        self.owner = owner

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Optional[bool]:
        """Compile and run each case, then the references."""
        o = self.owner
        if o._skip_body:
            return True
        cases = model_cases(pyfuncitem)
        if not cases or o._eager_pass:
            return None
        o.result["form"] = "model_case"
        o.mark("fixtures_done")
        if o.result["error"]:
            raise RuntimeError(o.result["error"])
        if o.path_not_applicable(cases[0]):
            return True
        prepared = []
        for i, case in enumerate(cases):
            prefix = f"case{i}." if len(cases) > 1 else ""
            model, inputs, ckw = wl.prepare_case(case, o.device or "cpu")
            prepared.append((prefix, case, model, inputs, ckw, wl.snapshot_state(model)))
        o.mark("on_device")
        o.tell_imports()
        with o.path.watching(o.artifact, o.device or "cpu"):
            try:
                with o.workload():
                    compiled = self.compile_and_run(prepared, compile_kwargs(pyfuncitem))
            finally:
                if o.spec.get("artifact") != "save":  # nothing compiles after this
                    lifetime.deprioritize_descendants()
            o.result["ran"] = True
            if compiled is None:  # the path failed, or cannot take this workload
                return True
            o.save_artifact()
        o.finish(compiled, lambda: self.references(prepared))
        return True

    def compile_and_run(self, prepared: List[Any], kwargs: Dict[str, Any]
                        ) -> Optional[wl.Outputs]:
        """Each case compiled the path's way and run once; None where the path has no
        artifact to load, failed to build one, or cannot take the model (recorded)."""
        o = self.owner
        if o.artifact.get("error"):
            return None
        compiled: wl.Outputs = {}
        phase = o.spec["phase"]
        for prefix, case, model, inputs, ckw, _ in prepared:
            try:
                fn = o.path.compile(phase, o.artifact_path, o._original_compile(),
                                    model, case, kwargs, inputs, ckw, o.artifact)
            except NotApplicable as e:
                o.artifact["na"] = str(e)
            except ArtifactFailed as e:
                o.artifact["error"] = str(e)
            except Exception:
                if o.path.via == "local":
                    raise
                o.artifact["error"] = (f"the {o.path.via} path failed to build or "
                                       f"load its artifact:\n"
                                       + traceback.format_exc(limit=6))
            if o.artifact.get("na") or o.artifact.get("error"):
                return None
            compiled.update(wl.run_case_step(fn, model, case, inputs, ckw, prefix))
        return compiled

    def references(self, prepared: List[Any]) -> References:
        """Eager (and under another seed: the random tensors), then float64."""
        eager: wl.Outputs = {}
        eager_note = ref_note = None
        ref: Optional[wl.Outputs] = None
        random: List[Dict[str, Any]] = []

        def eager_step(seed: int) -> wl.Outputs:
            out: wl.Outputs = {}
            for prefix, case, model, inputs, ckw, state in prepared:
                model.load_state_dict(state)
                with randomness.draws(seed):
                    out.update(wl.run_case_step(model, model, case, inputs, ckw, prefix))
            return out

        try:
            eager = eager_step(randomness.REFERENCE_SEED)
        except Exception:
            eager_note = "the model failed when run eagerly:\n" + traceback.format_exc(limit=3)
        if eager_note is None:
            random = self.owner.random_tensors(eager_step, eager)
            ref = {}
            try:
                for prefix, case, model, inputs, ckw, state in prepared:
                    model.load_state_dict(state)
                    with float64.model_in_float64(model), randomness.draws(
                            randomness.REFERENCE_SEED):
                        ref.update(wl.run_case_step(model, model, case, float64.up(inputs),
                                                    float64.up(ckw), prefix))
            except Exception as e:
                ref, ref_note = None, first_line(e)
        return References(eager, eager_note, ref, ref_note, random)
