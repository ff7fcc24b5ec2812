"""Device slots and their leases: which GPU (or CPU share) a check's child runs on.

A slot is `<device>#<k>` (k < jobs per device). A lease is an exclusive flock on the
slot's file in a private lock directory shared by every xdist worker of a session (or,
with --compile-cache-lock-dir, by sessions on one host). The OS drops a flock when its
holder dies, so a SIGKILLed worker never blocks the others. Never initialises CUDA:
devices are counted from CUDA_VISIBLE_DEVICES or /proc / nvidia-smi. No pytest, no torch.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from pytest_compilecache import adopted
from pytest_compilecache.leftovers import mark_owner

LOCK_DIR_ENV = "PYTEST_COMPILECACHE_LOCK_DIR"


class LeaseTimeout(RuntimeError):
    pass


def visible_gpus(env: Optional[Dict[str, str]] = None) -> List[str]:
    """GPU ids a child may be given, without touching CUDA."""
    env = dict(os.environ if env is None else env)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [d.strip() for d in cvd.split(",") if d.strip() and d.strip() != "-1"]
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        n = len([p for p in proc.iterdir() if p.is_dir()])
        if n:
            return [str(i) for i in range(n)]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
            return [str(i) for i in range(n)]
        except (OSError, subprocess.SubprocessError):
            pass
    return []


@dataclass(frozen=True)
class Slot:
    device: str          # a GPU id, or "cpu"
    index: int           # which of the device's concurrent jobs

    @property
    def name(self) -> str:
        return f"{self.device}#{self.index}"

    def env(self) -> Dict[str, str]:
        """What the child sees: only its GPU."""
        return {} if self.device == "cpu" else {"CUDA_VISIBLE_DEVICES": self.device}


def slots_for(devices: Sequence[str], jobs_per_device: int) -> List[Slot]:
    # interleaved so that successive leases spread over devices before doubling up
    return [Slot(d, k) for k in range(jobs_per_device) for d in devices]


def cpu_slots(cores: int, threads_per_check: int) -> List[Slot]:
    return slots_for(["cpu"], max(1, cores // max(1, threads_per_check)))


def private_dir(path: Path) -> Path:
    """`path` created 0700, or an existing directory this user owns that no one else
    can enter; a directory we did not make is never chmod-ed (it may be /tmp)."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of this user (a symlink, another "
                      f"owner, or open to others); remove it, or name another directory")
    return path


def shared_lock_dir(chosen: Path) -> Path:
    """The private subdirectory of a lock directory the user names: every session of
    this user on the host that names `chosen` meets in it, whatever `chosen` is (a
    1777 dir, a symlink), and `chosen` itself is left as it was."""
    chosen.mkdir(mode=0o700, parents=True, exist_ok=True)
    return private_dir(chosen / f"pytest-compilecache-{os.getuid()}")


def session_pool(settings: Any, lock_path: Optional[str]) -> "SlotPool":
    """A session's slots: its GPUs' (--compile-cache-gpus, else those visible), each
    --compile-cache-jobs-per-gpu times, or the cores' on CPU, a check's threads each."""
    slots = (slots_for(devices, settings.jobs_per_gpu) if (devices := _devices(settings))
             else cpu_slots(os.cpu_count() or 1, settings.threads))
    return SlotPool(Path(lock_path or session_lock_dir(settings.lock_dir)), slots,
                    settings.lease_timeout,
                    say=lambda m: print(f"pytest-compilecache: {m}", file=sys.stderr, flush=True))


def _devices(settings: Any) -> List[str]:
    """The GPUs a session's checks run on (none: the CPU's cores)."""
    from pytest_compilecache.gpulist import parse_gpus

    if settings.device == "cpu":
        return []
    return parse_gpus(settings.gpus) or visible_gpus()


def session_lock_dir(chosen: Optional[str]) -> str:
    """The slot-lock directory: the option, else the one the controller made for this
    session (inherited by xdist workers and recording sessions through the env)."""
    if chosen:
        return str(shared_lock_dir(Path(chosen)))
    inherited = adopted.from_env(LOCK_DIR_ENV)  # a parent session's, checked
    if inherited:
        return inherited
    made = tempfile.mkdtemp(prefix="pytest-compilecache-locks-")
    mark_owner(Path(made))  # a killed session's is found by `clean`
    os.environ[LOCK_DIR_ENV] = made
    return made


def forget_lock_dir(made: str) -> None:
    """The session that made `made` removed it: its variable goes too (a pytester
    session runs in the tests' process, and the next would inherit a removed dir)."""
    if os.environ.get(LOCK_DIR_ENV) == made:
        del os.environ[LOCK_DIR_ENV]


@dataclass
class Lease:
    slot: Slot
    acquired: float
    waited_s: float
    released: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        return {"slot": self.slot.name, "device": self.slot.device,
                "acquired": round(self.acquired, 3),
                "released": None if self.released is None else round(self.released, 3),
                "waited_s": round(self.waited_s, 3)}


class SlotPool:
    """Leases slots from `slots` through lock files in `lock_dir`."""

    def __init__(self, lock_dir: Path, slots: Sequence[Slot], timeout: float,
                 say: Callable[[str], None] = lambda s: None, poll_s: float = 0.2,
                 report_after_s: float = 30.0) -> None:
        self.lock_dir = private_dir(Path(lock_dir))
        self.slots = list(slots)
        self.timeout = timeout
        self.say = say
        self.poll_s = poll_s
        self.report_after_s = report_after_s
        self.stopped = False  # the session is ending: a wait for a slot ends (ahead.py)

    def _path(self, slot: Slot) -> Path:
        return self.lock_dir / f"slot-{slot.name.replace('#', '-')}.lock"

    def _holder_path(self, slot: Slot) -> Path:
        """Who holds the slot, for the wait and timeout messages."""
        return self._path(slot).with_suffix(".holder")

    @contextlib.contextmanager
    def lease(self, who: str, device: Optional[str] = None) -> Iterator[Lease]:
        """Hold a free slot (on `device`, when given) for the block."""
        from filelock import FileLock, Timeout

        order = [s for s in self.slots if device is None or s.device == device]
        if not order:
            raise LeaseTimeout(f"no slot on device {device!r} (slots: "
                               f"{', '.join(s.name for s in self.slots)})")
        start = time.monotonic()
        next_report = start + self.report_after_s
        while True:
            for slot in order:
                lock = FileLock(str(self._path(slot)))
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue
                lease = Lease(slot, time.time(), time.monotonic() - start)
                info = self._holder_path(slot)
                with contextlib.suppress(OSError):
                    info.write_text(json.dumps({"pid": os.getpid(), "who": who,
                                                "since": time.time()}))
                try:
                    yield lease
                finally:
                    lease.released = time.time()
                    with contextlib.suppress(OSError):
                        info.unlink()
                    lock.release()
                return
            now = time.monotonic()
            if self.stopped:
                raise LeaseTimeout(f"the session ended before a device slot came free for {who}")
            if now - start > self.timeout:
                raise LeaseTimeout(
                    f"no device slot came free in {self.timeout:.0f} s for {who} (slots: "
                    f"{', '.join(s.name for s in order)}; holders: {self.holders()}); raise "
                    f"--compile-cache-lease-timeout or lower -n")
            if now >= next_report:
                self.say(f"{who} waits for a device slot ({len(order)} busy: {self.holders()})")
                next_report = now + self.report_after_s
            time.sleep(self.poll_s)

    def holders(self) -> str:
        out = []
        for slot in self.slots:
            info = self._holder_path(slot)
            with contextlib.suppress(OSError, ValueError):
                h = json.loads(info.read_text())
                out.append(f"{slot.name}: {h.get('who')} (pid {h.get('pid')})")
        return "; ".join(out) or "unknown"


def held_slots(lock_dir: Optional[str]) -> Dict[str, str]:
    """Who holds which slot now (`<node id> [<phase>]` -> `cpu#0`), from the holder files
    the leases write: what the xdist controller's heartbeat says of its workers."""
    out: Dict[str, str] = {}
    for info in Path(lock_dir).glob("slot-*.holder") if lock_dir else ():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            device, _, index = info.stem[len("slot-"):].rpartition("-")
            out[str(json.loads(info.read_text()).get("who"))] = f"{device}#{index}"
    return out


def slots_header(settings: Any, workers: int) -> str:
    """The session's header line: how many checks can hold a slot at once and what the
    processes running checks (xdist's workers, or this one) do while they are taken, so
    that a worker waiting for a slot is expected, not a hang."""
    devices = _devices(settings)
    if devices:
        n = len(devices) * settings.jobs_per_gpu
        what = f"GPU {', '.join(devices)}, {settings.jobs_per_gpu} a GPU"
        raise_it = "--compile-cache-jobs-per-gpu"
    else:
        cores = os.cpu_count() or 1
        n = len(cpu_slots(cores, settings.threads))
        what = f"CPU: {cores} cores, --compile-cache-threads={settings.threads} a check"
        raise_it = "a lower --compile-cache-threads"
    said = f"compile-cache: {n} device slot{'s' if n != 1 else ''} ({what}); "
    if workers <= 1:
        return said + "checks run one at a time in this process"
    if workers <= n:
        return said + f"{workers} xdist workers, each check holds a slot while it compiles"
    return said + (f"{workers} xdist workers share {'it' if n == 1 else 'them'}: "
                   f"{workers - n} wait{'s' if workers - n == 1 else ''} while "
                   f"{'another compiles' if n == 1 else 'others compile'} "
                   f"(more at once: {raise_it}; fewer waiting: -n {n})")
