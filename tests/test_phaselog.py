"""A phase's log capped on disk while a real writer process appends to it: nothing the
writer appends is lost to a cut (its last line survives), and the file ends as its head,
a line saying what was left out, and its tail. Fast: one writer, 48 MiB, a small cap."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_compilecache.launch.phaselog import CappedLog, open_log, punch_hole, tail_of

WRITER = """
import os, sys
line = b"z" * 1023 + b"\\n"
for _ in range(48 << 10):
    os.write(1, line)
os.write(1, b"THE LAST WORDS\\n")
"""


def test_a_capped_log_keeps_the_last_line_a_writer_appended(tmp_path: Path) -> None:
    for attempt in range(3):  # the cap and the rewrite, end to end (the race: next test)
        log = tmp_path / f"phase{attempt}.log"
        fd = open_log(log)
        with CappedLog(log, head=1 << 20, tail=1 << 20, every=0.001) as capped:
            subprocess.run([sys.executable, "-c", WRITER], stdout=fd, check=True)
        os.close(fd)
        assert capped.cut
        assert tail_of(log).rstrip().endswith("THE LAST WORDS")
        assert log.stat().st_size <= (2 << 20) + 4096
        text = log.read_bytes()
        assert b"MiB of this phase's output left out here" in text
        assert b"\0" not in text  # the holes are gone once the phase is over


def test_what_a_writer_appends_between_a_read_and_a_cut_is_kept(tmp_path: Path) -> None:
    """The instant the race above needs, made to happen: the log is read to its end, the
    writer appends its last line, then the cut. Truncating there lost the line (seen once
    in CI under load on a 200 MiB phase); freeing what was read loses nothing."""
    log = tmp_path / "phase.log"
    fd = open_log(log)
    os.write(fd, b"z" * 1023 + b"\n" * 1 + b"y" * 1023 * 3000 + b"\n")
    capped = CappedLog(log, head=1 << 20, tail=1 << 20)
    capped._fd = os.open(log, os.O_RDWR)
    if not _can_punch(tmp_path):
        pytest.skip("no hole punching here: CappedLog truncates, and this race stays (its doc)")
    capped._catch_up()
    os.write(fd, b"THE LAST WORDS\n")  # after the read, before the cut
    capped._free()
    capped._stop.set()
    capped.__exit__(None, None, None)
    os.close(fd)
    assert capped.cut and tail_of(log).rstrip().endswith("THE LAST WORDS")


def test_punching_a_hole_keeps_the_files_length(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * (1 << 20))
    with open(path, "r+b") as f:
        if not punch_hole(f.fileno(), 4096, 1 << 19):
            pytest.skip("this filesystem cannot punch holes: CappedLog truncates instead")
    data = path.read_bytes()
    assert len(data) == 1 << 20 and data[4096:8192] == b"\0" * 4096 and data[-1:] == b"a"


def _can_punch(where: Path) -> bool:
    probe = where / "probe"
    probe.write_bytes(b"a" * 8192)
    with open(probe, "r+b") as f:
        return punch_hole(f.fileno(), 0, 4096)
