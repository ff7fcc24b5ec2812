"""What a check is doing while it runs: a phase can take minutes on a GPU.

Under -v, a line per finished phase (`  cold phase: 13.5 s`), written as pytest's live
logging writes (pytest then repeats the test's name before its outcome). Otherwise, on a
terminal only, a live `[cold 12 s]` after the progress dots, erased when the phase ends,
written straight to the terminal so pytest's own line accounting is untouched. Nothing
in an xdist worker (it has no terminal) or when output is not a terminal (CI logs stay
clean).

Under xdist the controller runs no phase and its workers have no terminal: `Workers`
says what each worker runs from the reports they send, a line when a check starts or
ends in a log (no terminal), and on a terminal too a line after 30 s without one, so a
worker waiting minutes for a slot is not silence. No pytest import: the session hands
in the terminal reporter."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, ContextManager, Dict, Iterator, Mapping, Optional, Tuple


class Progress:
    def __init__(self, reporter: Any = None, verbosity: int = 0, live: bool = False,
                 uncaptured: Callable[[], ContextManager[Any]] = contextlib.nullcontext
                 ) -> None:
        self.reporter = reporter       # pytest's TerminalReporter, or None (nothing shown)
        self.verbose = reporter is not None and verbosity > 0
        self.live = reporter is not None and verbosity <= 0 and live
        self.uncaptured = uncaptured   # pytest captures output while a test runs

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        """`what` ('cold', 'warm', 'baseline recording at 09d6b45') runs in the block.
        Only pytest's own thread shows it: phases run side by side (ahead.py) are shown
        as its wait for them."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        started = time.monotonic()
        ticker = _Ticker(self.reporter, what, self.uncaptured) if self.live else None
        try:
            yield
        finally:
            if ticker is not None:
                ticker.stop()
            if self.verbose:
                with self.uncaptured():
                    self.reporter.write_line(f"    {what}: {time.monotonic() - started:.1f} s")


class _Ticker:
    """`[what N s]` at the end of the current terminal line, redrawn each second."""

    def __init__(self, reporter: Any, what: str,
                 uncaptured: Callable[[], ContextManager[Any]]) -> None:
        self.uncaptured = uncaptured
        tw = getattr(reporter, "_tw", None)
        self.file: Any = getattr(tw, "_file", None)
        try:  # room left on pytest's current line: backspaces cannot cross a wrap
            self.room = int(tw.fullwidth) - int(tw.width_of_current_line) - 1  # type: ignore[union-attr]
        except Exception:
            self.room = 0
        self.what = what
        self.shown = 0
        self.started = time.monotonic()
        self.done = threading.Event()
        self.thread: Optional[threading.Thread] = None
        if self.file is not None and self.room >= 16:
            self.thread = threading.Thread(target=self._run, daemon=True,
                                           name="compilecache-progress")
            self.thread.start()

    def _draw(self, text: str) -> None:
        try:
            with self.uncaptured():
                self._write(text)
        except (OSError, ValueError):  # a closed terminal: stop showing
            self.done.set()

    def _write(self, text: str) -> None:
        """Back over what is shown, write `text`, blank what is left of the old one."""
        text = text[:self.room]
        extra = max(0, self.shown - len(text))
        self.file.write("\b" * self.shown + text + " " * extra + "\b" * extra)
        self.file.flush()
        self.shown = len(text)

    def _run(self) -> None:
        while not self.done.wait(0 if not self.shown else 1.0):
            self._draw(f" [{self.what} {time.monotonic() - self.started:.0f} s]")

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
            if self.shown and not self.thread.is_alive():  # a stuck terminal: leave it
                n, self.shown = self.shown, 0
                with contextlib.suppress(OSError, ValueError), self.uncaptured():
                    self.file.write("\b" * n + " " * n + "\b" * n)
                    self.file.flush()


class Workers:
    """What xdist's workers run, said through `say` (one line each): in a log, each
    check's start and end; on a terminal and in a log, the running checks after
    `every_s` seconds without a line (`beat`, called each second)."""

    def __init__(self, say: Callable[[str], None], log: bool, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 held: Callable[[], Mapping[str, str]] = dict) -> None:
        self.say, self.log, self.every_s, self.clock = say, log, every_s, clock
        self.held = held  # `<node id> [<phase>]` -> the device slot its phase holds
        self.running: Dict[str, Tuple[str, float]] = {}  # worker -> (node id, since)
        self.done = 0
        self.last = clock()  # when a line was said

    def _line(self, text: str) -> None:
        self.last = self.clock()
        self.say(f"compile-cache: {text}")

    def started(self, worker: str, nodeid: str) -> None:
        self.running[worker] = (nodeid, self.clock())
        if self.log:
            self._line(f"[{worker}] started {nodeid}")

    def finished(self, worker: str, nodeid: str, outcome: str) -> None:
        _, since = self.running.pop(worker, (nodeid, self.clock()))
        self.done += 1
        if self.log:
            self._line(f"[{worker}] {outcome} {nodeid} ({self.clock() - since:.0f} s)")

    def beat(self) -> None:
        if self.running and self.clock() - self.last >= self.every_s:
            now, held = self.clock(), self.held()
            running = ", ".join(f"[{w}] {n} {now - t:.0f} s ({_holds(n, held)})"
                                for w, (n, t) in sorted(self.running.items()))
            self._line(f"{self.done} check(s) done; running: {running}")


def _holds(nodeid: str, held: Mapping[str, str]) -> str:
    """`cold on cpu#0`, or that the check holds no slot (it waits for one, or is
    between its phases)."""
    for who, slot in held.items():
        if who.startswith(f"{nodeid} ["):
            return f"{who[len(nodeid) + 2:-1]} on {slot}"
    return "holds no slot"
