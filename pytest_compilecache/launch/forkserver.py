"""The preloaded phase interpreter: `python -m pytest_compilecache.launch.forkserver LOG
[--bare] [--bytecode DIR]` imports torch, pytest and the test modules' installed
libraries once (it never initialises CUDA and never compiles), then forks one phase per
request, each as fresh as a restart for what torch caches.

Why a fork is as fresh as a restart here, and where it is not (then the launcher starts
a fresh interpreter instead, see `preloaded.PreloadedLauncher`):
- In-memory compile state: none exists. `torch._dynamo` and `torch._inductor.compile_fx`
  are imported (the compile stack: 1-3 s a phase otherwise) but nothing is compiled. What
  their import captures from a phase's own variables is redone in the child (`_REDO`:
  the precompile cache's directory, caching precompile's switch; `REDO_BY_MODULE`: the
  precompiled-header dir under the temp dir); torch 2.11's inductor asks at import
  whether CUDA is available, which poisons forks: it is answered through NVML
  (`cudaprobe.CudaAsked`) and each phase checks the answer under its own environment.
  `--bare` leaves the stack out.
- The environment: the child's `os.environ` (and C's) is replaced before pytest starts.
  What torch read at import is recorded here (`reads`): torch's config entries are read
  again in the child (`_ConfigEntry.__init__` replayed), any other variable read at
  import must be equal, or the phase runs fresh.
- CUDA: never initialised here, checked by forking a probe that asks torch whether it is
  in a bad fork; the per-check `CUDA_VISIBLE_DEVICES` is read when the child starts CUDA.
- Per-process randomness: `random` reseeds itself after a fork; str hashing does not, so
  each lane is its own interpreter with its own hash seed, and a check's cold and warm
  phases fork from different lanes, as two restarts differ.
- CPU threads: OpenMP read OMP_NUM_THREADS as it loaded; a phase's own (a rank's share)
  is set in the child as torch sets it at start (becoming.py, where the child becomes
  the phase).
- sys.path: `[cwd] + PYTHONPATH + the rest`, rebuilt for the child's cwd and PYTHONPATH.
- Bytecode: with `--bytecode DIR`, where Python writes none and does not find that of
  torch and its compile stack where it looks (pip compiles it at install, whatever
  PYTHONDONTWRITEBYTECODE says), this interpreter reads and keeps the bytecode of its
  imports in DIR (`sys.pycache_prefix`, launch/state.py); a phase gets the
  interpreter's own settings back.

Protocol: one JSON line per message on the inherited stdin/stdout pipes. The server says
hello when its imports are done; `{"preload": [MODULE, ...]}` imports installed libraries
the test modules import (the controller collected them) and says hello again;
a fork request gets `{"pid"}`, then `{"status", "maxrss_kb", "leftovers"}`.

What a phase leaves running is this interpreter's once the phase is over (it is their
subreaper): it kills and reaps them before it says the phase is done, and names those
the phase's process group kill would have missed in `leftovers` (descendants.py).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from pytest_compilecache.launch.cudaprobe import CudaAsked, nvml_cuda_available
from pytest_compilecache.launch.becoming import become_phase
from pytest_compilecache.launch.descendants import end_below, subreaper
from pytest_compilecache.launch.envspy import (REDO_BY_MODULE, REDO_BY_NAME, REDO_VARIABLE,
                                              EnvSpy, Replay)
from pytest_compilecache.launch.state import finds_bytecode
from pytest_compilecache.owndeps import plugin_only_modules
from pytest_compilecache.timeline import process_start

class Preloaded:
    """What this interpreter has imported, and what those imports read from the
    environment (name -> can a phase read it again; where a read that cannot was made)."""

    def __init__(self) -> None:
        self.reads: Dict[str, bool] = {}
        self.readers: Dict[str, str] = {}
        self.entries: Dict[int, Tuple[List[str], Replay]] = {}
        self.extras: List[str] = []
        self.failed: List[str] = []
        self.redo: List[str] = []  # import-time captures each phase redoes (_REDO)
        # a redo -> its variable once the imports were done (torch writes back what it
        # resolved: the inductor cache dir), as a phase's value that needs no redo
        self.captured: Dict[str, Optional[str]] = {}
        self.copies: List[Dict[str, str]] = []  # where an import copied the whole environment
        self.stack: List[str] = []  # the compile stack's modules, once imported
        self.cuda = CudaAsked()
        # when this interpreter started and finished each import (the report's timeline)
        self.marks: List[Tuple[str, float]] = [("started", process_start())]
        # this interpreter's own bytecode settings, while it imports with the launcher's
        # bytecode dir (state.py); a phase gets them back
        self.bytecode: Optional[Tuple[Optional[str], bool]] = None

    def keep_bytecode(self, where: str) -> None:
        """Where Python writes no bytecode and torch's was not installed with it, keep
        that of this interpreter's imports in `where` (the launcher's, state.py), and read
        it from there. Where torch's was installed, it is read where it is: a prefix
        would hide it, and every session with an empty `where` (a first one, a CI
        machine's) would compile torch's sources again (7 s of CPU an interpreter)."""
        if (sys.dont_write_bytecode and self.bytecode is None
                and not finds_bytecode(("torch", *COMPILE_STACK))):
            self.bytecode = (sys.pycache_prefix, sys.dont_write_bytecode)
            sys.pycache_prefix, sys.dont_write_bytecode = where, False
            self.mark("bytecode")

    def own_bytecode(self) -> None:
        """In a phase: the interpreter's own bytecode settings, as a restart has them."""
        if self.bytecode is not None:
            sys.pycache_prefix, sys.dont_write_bytecode = self.bytecode

    def mark(self, name: str) -> None:
        self.marks.append((name, time.time()))

    def base(self) -> None:
        """What every phase imports. What the plugin's own code and its own dependencies
        read here is not the tests' (owndeps.py): a phase reads its own environment when
        it runs (its spec, its cache dirs), never what this import saw."""
        def imports() -> None:
            import pytest  # noqa: F401

            import torch  # noqa: F401

            _import_pytest_plugins()
            import pytest_compilecache.child.body  # noqa: F401  (and the phase plugin)
            from pytest_compilecache import paths

            paths.builtin()  # imports every path's module

        self._watching(imports, plugin_only_modules())

    def compile_stack(self) -> None:
        """Dynamo and inductor: each phase would import them first thing (1-3 s)."""
        def imports() -> None:
            with self.cuda:
                for name in COMPILE_STACK:
                    importlib.import_module(name)
                    self.stack.append(name)

        try:
            self._watching(imports)
        except Exception:  # a torch without them: each phase imports what it has
            pass

    def more(self, extras: Sequence[str]) -> None:
        """Installed libraries the test modules import: torchvision, transformers, ..."""
        def imports() -> None:
            for name in extras:
                try:
                    importlib.import_module(name)
                    self.extras.append(name)
                except BaseException:  # the phase's own import will say what is wrong
                    self.failed.append(name)

        self._watching(imports)

    def _watching(self, imports: Any, ignored: FrozenSet[str] = frozenset()) -> None:
        spy = EnvSpy(os.environ, ignored)
        real = os.environ
        os.environ = spy  # type: ignore[assignment]
        try:
            imports()
        finally:
            os.environ = real
        for k, again in spy.reads.items():
            self.reads[k] = self.reads.get(k, True) and again
        for k, where in spy.readers.items():
            self.readers.setdefault(k, where)
        for keys, replay in spy.entries:
            got = self.entries.setdefault(id(replay[0]), ([], replay))
            got[0].extend(k for k in keys if k not in got[0])
        self.redo += [r for r in spy.redo if r not in self.redo]
        for r in spy.redo:
            if r in REDO_VARIABLE:
                self.captured.setdefault(r, real.get(REDO_VARIABLE[r]))
        self.redo += [redo.__name__ for module, redo in REDO_BY_MODULE.items()
                      if module in sys.modules and redo.__name__ not in self.redo]
        self.copies += [c for c in spy.copies if c not in self.copies]

    def tops(self) -> List[str]:
        return sorted({m.split(".")[0] for m in sys.modules} - set(sys.builtin_module_names)
                      - set(getattr(sys, "stdlib_module_names", ())))

    def hello(self) -> Dict[str, Any]:
        return {"reads": self.reads, "readers": self.readers, "extras": self.extras,
                "failed": self.failed, "problem": fork_problem(self.stack + self.extras),
                "threads": native_threads(), "stack": self.stack, "redo": self.redo,
                "copies": self.copies,
                "cuda_asked": self.cuda.answer, "marks": self.marks}

    def _as_imported(self, redo: str) -> bool:
        """The variable a capture took has the same value in this phase as at import."""
        if redo not in self.captured:
            return False
        return os.environ.get(REDO_VARIABLE[redo]) == self.captured[redo]

    def phase_problem(self) -> Optional[str]:
        """In a forked phase, its environment in place: redo what the imports captured
        from it; None, or why this phase is not as fresh as a restart after all."""
        for name in self.redo:
            if self._as_imported(name):
                continue  # the phase's value is the one the import took
            if not REDO_BY_NAME[name]():
                return f"cannot redo what torch's import captured ({name})"
        if self.cuda.answer is not None:
            now = nvml_cuda_available()
            if now != self.cuda.answer:
                return (f"torch asked at import whether CUDA is available ({self.cuda.answer}); "
                        f"in this phase's environment the answer is {now}")
        return None


# imported in the preloaded interpreter after torch (`Preloaded.compile_stack`)
COMPILE_STACK = ("torch._dynamo", "torch._inductor.compile_fx")


def _import_pytest_plugins() -> None:
    """The installed pytest plugins (xdist, ...): each phase's pytest loads them."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="pytest11"):
        try:
            ep.load()
        except Exception:  # the phase's own pytest will say what is wrong with it
            pass


def fork_problem(extras: Sequence[str] = ()) -> Optional[str]:
    """Why a phase cannot be forked from this process, or None."""
    problem = _fork_problem()
    if problem and extras:
        problem += f" (after importing {', '.join(extras)})"
    return problem


def _fork_problem() -> Optional[str]:
    import torch

    if torch.cuda.is_initialized():
        return "CUDA was initialised in the preloaded interpreter"
    import threading

    if threading.active_count() > 1:  # a Python thread may hold a lock the child needs
        return (f"the preloaded interpreter runs {threading.active_count()} Python threads "
                f"(a fork copies only one)")
    pid = os.fork()
    if pid == 0:  # the probe: does torch call this child a bad fork?
        bad = getattr(torch._C, "_cuda_isInBadFork", lambda: False)()
        os._exit(3 if bad else 0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 3:
        return "importing torch and pytest touched CUDA (torch calls a forked child a bad fork)"
    return None


def native_threads() -> List[str]:
    """The names of this process's threads. Idle native pools (OpenBLAS, loaded with
    numpy by `import torch`) are allowed: they handle fork (pthread_atfork), and nothing
    has run on them; OpenMP has not run either (no torch op runs here)."""
    names = []
    try:
        for t in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
    except OSError:
        pass
    return names


def main(argv: List[str]) -> None:
    """Serve fork requests until stdin closes."""
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    log = os.open(argv[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    t0 = time.perf_counter()
    subreaper(True)  # what a phase orphans comes here, to be ended with the phase
    state = Preloaded()
    if "--bytecode" in argv:
        state.keep_bytecode(argv[argv.index("--bytecode") + 1])
    state.base()
    state.mark("torch")
    if "--bare" not in argv:
        state.compile_stack()
        state.mark("stack")
    base_path = list(sys.path)
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]

    def say(msg: Dict[str, Any]) -> None:
        replies.write((json.dumps(msg) + "\n").encode())

    hello = state.hello()
    say({"ready": True, "pid": os.getpid(), "import_s": round(time.perf_counter() - t0, 3),
         **hello})
    for line in requests:
        req = json.loads(line)
        if "preload" in req:  # then say again what may differ, and whether forks are safe
            state.mark("preload asked")
            state.more(req["preload"])
            state.mark("preload done")
            hello = state.hello()
            say(hello)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            # a preload may have made forking unsafe after the launcher last asked: the
            # phase then vetoes itself, and runs fresh
            become_phase(req, state, base_path, own, hello.get("problem"))
        say({"pid": pid})
        _, status, usage = os.wait4(pid, 0)
        left = end_below(os.getpid(), pid)
        say({"status": status, "maxrss_kb": usage.ru_maxrss, "leftovers": left})
    # the session is over: this interpreter compiled nothing and holds nothing to save,
    # and tearing down torch's modules takes seconds (the session waits for it)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
