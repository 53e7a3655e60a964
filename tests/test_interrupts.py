"""Interrupted and failing writers: the site build (``scripts/site.py``) and :func:`hypviz.capture.save`.

* A SIGINT or SIGTERM stops ``scripts/site.py`` at once with exit status 130 or 143: the Sphinx worker it
  started is killed, its temporary folder removed, the old site kept, one line on stderr.  Sphinx is stood in
  for by a function that writes its pages, starts a worker process as ``-j`` does, then works on: everything
  else (the handlers, the temporary folder, the renames) is the script's own code, run as ``python site.py``.
* A signal that arrives between the two renames that put the new site in place is acted on after them.
* Temporary folders that killed builds left beside ``--out`` are removed by the next build, which first waits
  for a build under way in the same folder (and leaves its folder alone meanwhile).
* A save killed while it writes leaves its temporary file, which the next save into the folder removes; a
  save interrupted by ``KeyboardInterrupt`` or failing to write leaves none, and leaves the file as it was.
* A save that cannot write (no space left, a file size limit) raises one line naming the file and the error.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from hypviz import data
from hypviz.capture import records

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "scripts" / "site.py"
_spec = importlib.util.spec_from_file_location("hypviz_site_script_interrupts", SITE)
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and process groups of POSIX")


def _gone(pid: int, wait_s: float = 20.0) -> bool:
    """The process ``pid`` has ended (absent, or a zombie waiting to be reaped), within ``wait_s`` seconds."""
    end = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        except OSError:  # no /proc: ask the kernel
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            state = "R"
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def _ended_at_last(proc: subprocess.Popen):
    """Kill the process group of ``proc`` (started with ``start_new_session``) if it still runs when the block ends."""
    try:
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _wait_for(path: Path, proc: subprocess.Popen, wait_s: float = 120.0) -> str:
    end = time.monotonic() + wait_s
    while not path.exists() or not path.read_text():
        if proc.poll() is not None:
            raise AssertionError(f"ended before it was ready: {proc.communicate()}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"not ready after {wait_s} s")
        time.sleep(0.05)
    return path.read_text()


# --------------------------------------------------------------------------- #
# the site build
# --------------------------------------------------------------------------- #
DRIVER = r'''
import importlib.util, multiprocessing, os, sys, time, types
from pathlib import Path

spec = importlib.util.spec_from_file_location("site_under_test", sys.argv[1])
site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(site)
mode, ready, nbs = os.environ["MODE"], Path(os.environ["READY"]), Path(os.environ["NBS"])


def build_main(argv):
    """Sphinx's entry point, stood in for: the pages of the site, then (mode "hang") a worker and work without end."""
    target = Path(argv[-1])
    (target / "notebooks").mkdir(parents=True)
    (target / "index.html").write_text("new")
    for nb in nbs.glob("[0-9][0-9]_*.ipynb"):
        (target / "notebooks" / f"{nb.stem}.html").write_text("a page")
    if mode == "hang":
        worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,))
        worker.start()
        ready.write_text(str(worker.pid))
        time.sleep(300)
    return 0


fake = types.ModuleType("sphinx.cmd.build")
fake.build_main = build_main
sys.modules.update({"sphinx": types.ModuleType("sphinx"), "sphinx.cmd": types.ModuleType("sphinx.cmd"),
                    "sphinx.cmd.build": fake})
if mode == "rename":  # the signal arrives between the renames: after the old site is moved aside
    real_replace = os.replace

    def replace(src, dst):
        real_replace(src, dst)
        if ".old-" in os.fspath(dst):
            os.kill(os.getpid(), int(os.environ["SIGNAL"]))

    os.replace = replace
sys.exit(site.main(sys.argv[2:]))
'''


@pytest.fixture()
def site_run(tmp_path):
    """Runs ``python site.py --out OUT --force`` (Sphinx stood in for) on an old site; returns a starter."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    (nbs / "01_a.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    out = tmp_path / "build" / "html"
    (out / "zh_CN").mkdir(parents=True)
    (out / "index.html").write_text("old")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)

    def start(mode: str, sig: int = signal.SIGTERM) -> subprocess.Popen:
        env = dict(os.environ, MODE=mode, READY=str(tmp_path / "ready"), NBS=str(nbs), SIGNAL=str(int(sig)),
                   MPLBACKEND="Agg")
        return subprocess.Popen([sys.executable, str(driver), str(SITE), "--out", str(out), "--notebooks-dir", str(nbs),
                                 "--force"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    start.out, start.ready = out, tmp_path / "ready"
    return start


@posix_only
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_site_build_at_once_and_keeps_the_old_site(site_run, sig):
    out = site_run.out
    (out.parent / ".html.tmp-killed01").mkdir()  # left by an earlier build that was killed
    (out.parent / ".html.tmp-killed01" / "page.html").write_text("x" * 1000)
    proc = site_run("hang")
    with _ended_at_last(proc):
        worker = int(_wait_for(site_run.ready, proc))
        left = sorted(p.name for p in out.parent.iterdir())
        assert ".html.tmp-killed01" not in left and len(left) == 2, left  # the stale one removed; this build's own
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"stopped by {signal.Signals(sig).name}" in lines[0] and "was left as it was" in lines[0], lines
    assert sorted(p.name for p in out.parent.iterdir()) == ["html"]  # the temporary folder removed
    assert (out / "index.html").read_text() == "old"
    assert _gone(worker), f"the Sphinx worker {worker} still runs"


@posix_only
def test_a_signal_between_the_renames_is_acted_on_after_them(site_run):
    proc = site_run("rename", signal.SIGTERM)
    with _ended_at_last(proc):
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM; the new site was already in place" in err and "Traceback" not in err, err
    assert (site_run.out / "index.html").read_text() == "new"
    assert sorted(p.name for p in site_run.out.parent.iterdir()) == ["html"]  # no .html.old-*, no .html.tmp-*


def _current_site(tmp_path: Path) -> tuple[Path, dict]:
    """A site whose stamp matches its (small) inputs: ``build(force=False)`` keeps it without running Sphinx."""
    docs, nbs = tmp_path / "docs", tmp_path / "notebooks"
    docs.mkdir()
    (docs / "conf.py").write_text("project = 'x'\n")
    nbs.mkdir()
    (nbs / "01_a.ipynb").write_text("{}")
    (tmp_path / "README.md").write_text("# r\n")
    paths = {"docs": docs, "notebooks_dir": nbs, "readme": tmp_path / "README.md"}
    out = tmp_path / "build" / "html"
    (out / "zh_CN").mkdir(parents=True)
    (out / "index.html").write_text("kept")
    (out / "zh_CN" / "index.html").write_text("kept")
    stamp = site.input_stamp(docs, nbs, paths["readme"], options="warnings_as_errors=True")
    (out / site.STAMP_NAME).write_text(stamp + "\n")
    return out, paths


@posix_only
def test_the_next_build_removes_what_killed_builds_left_after_waiting_for_a_running_one(tmp_path):
    import fcntl

    out, paths = _current_site(tmp_path)
    stale = [out.parent / ".html.tmp-ab12cd34", out.parent / ".html.old-ef56gh78"]
    for p in stale:
        (p / "html").mkdir(parents=True)
    other = out.parent / ".other.tmp-ab12cd34"  # another output's: not this build's to remove
    other.mkdir()
    said: list[str] = []
    waiting = threading.Event()

    def log(line: str) -> None:
        said.append(line)
        if "waiting for another build" in line:
            waiting.set()

    held = os.open(out.parent, os.O_RDONLY)  # a build under way in build/ holds this lock
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        done: list[Path] = []
        builder = threading.Thread(target=lambda: done.append(site.build(out, force=False, log=log, **paths)))
        builder.start()
        assert waiting.wait(60), said
        assert all(p.exists() for p in stale), "a folder was removed while another build was under way"
    finally:
        os.close(held)
    builder.join(60)
    assert done == [out.resolve() / "index.html"], said
    assert not any(p.exists() for p in stale) and other.exists()
    assert any("removed 2 temporary folder(s)" in line for line in said), said
    assert any("unchanged, kept" in line for line in said) and (out / "index.html").read_text() == "kept"


def test_main_leaves_the_signal_handlers_as_it_found_them(tmp_path, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert site.main(["--out", str(tmp_path / "html"), "--notebooks-dir", str(empty)]) == 1
    assert {s: signal.getsignal(s) for s in before} == before
    capsys.readouterr()


# --------------------------------------------------------------------------- #
# Capture.save
# --------------------------------------------------------------------------- #
def _records(n: int = 64) -> list[records.LayerRecord]:
    q = data.lifted_gaussian((2, n), 3, 1.0, seed=3)
    return [records.LayerRecord(name="enc.0", queries=q, keys=q, values=q, k=1.0, mode="generic", kind="distance",
                                temperature=1.0)]


def _tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


SAVE_AND_HANG = r'''
import os, sys, time
import torch
from hypviz import data
from hypviz.capture import records

real_save = torch.save


def save_then_hang(obj, f):  # torch.save, stopped half-way: part of the file written, then a wait to be killed
    f.write(b"PK\x03\x04 part of a capture file")
    f.flush()
    open(sys.argv[2], "w").write("writing")
    time.sleep(300)


torch.save = save_then_hang
q = data.lifted_gaussian((2, 8), 3, 1.0, seed=3)
rec = records.LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic", kind="distance",
                          temperature=1.0)
records.save([rec], sys.argv[1])
'''


@posix_only
def test_a_save_killed_while_writing_leaves_a_temporary_file_that_the_next_save_removes(tmp_path):
    target = tmp_path / "att.pt"
    records.save(_records(), target)
    before = target.read_bytes()
    script = tmp_path / "hang.py"
    script.write_text(SAVE_AND_HANG)
    proc = subprocess.Popen([sys.executable, str(script), str(target), str(tmp_path / "ready")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    with _ended_at_last(proc):
        _wait_for(tmp_path / "ready", proc)
        proc.kill()  # SIGKILL: nothing of the process runs any more
        proc.communicate(timeout=60)
    left = _tmp_files(tmp_path)
    assert len(left) == 1 and left[0].startswith(".att.pt."), left
    assert target.read_bytes() == before  # never half-written
    mine = tmp_path / f".other.pt.{records._HOST}.{os.getpid()}.{'0' * 32}.tmp"  # a save of a running process
    mine.write_bytes(b"")
    records.save(_records(8), tmp_path / "other.pt")  # the next save into the folder
    assert _tmp_files(tmp_path) == [mine.name]
    assert len(records.load(target)[0].queries[0]) == 64


def test_a_save_interrupted_by_keyboard_interrupt_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "att.pt"
    records.save(_records(), target)
    before = target.read_bytes()

    def interrupted(obj, f):
        f.write(b"PK\x03\x04 part of a capture file")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        records.save(_records(8), target)
    assert _tmp_files(tmp_path) == [] and target.read_bytes() == before


def test_a_save_on_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch):
    target = tmp_path / "att.pt"
    records.save(_records(), target)
    before = target.read_bytes()

    def full_disk(obj, f):  # what torch.save raises when a write fails: its own words, no errno
        f.write(b"PK\x03\x04 part of a capture file")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_disk)
    real_statvfs = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_bavail, self.f_frsize = 0, st.f_frsize

    monkeypatch.setattr(os, "statvfs", lambda p: Full(real_statvfs(p)))
    with pytest.raises(OSError) as info:
        records.save(_records(8), target)
    text = str(info.value)
    assert info.value.errno == errno.ENOSPC and "\n" not in text, text
    assert str(target) in text and "no space left on device" in text and "nothing was written" in text, text
    assert "Traceback" not in text and info.value.__cause__ is None and info.value.__suppress_context__
    assert _tmp_files(tmp_path) == [] and target.read_bytes() == before


SAVE_OVER_LIMIT = r'''
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
from hypviz import data
from hypviz.capture import records
q = data.lifted_gaussian((4, 400), 7, 1.0, seed=3)  # about 100 kB a tensor: past the limit
rec = records.LayerRecord(name="enc.0", queries=q, keys=q, values=q, k=1.0, mode="generic", kind="distance",
                          temperature=1.0)
try:
    records.save([rec], sys.argv[1])
except OSError as exc:
    print(exc.errno, exc, sep="\n")
'''


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits of POSIX")
def test_a_save_whose_writes_fail_says_the_error_of_the_write(tmp_path):
    """A real write failure of torch.save (a file size limit: EFBIG, as a full disk gives ENOSPC)."""
    target = tmp_path / "att.pt"
    target.write_bytes(b"the old file")
    script = tmp_path / "limit.py"
    script.write_text(SAVE_OVER_LIMIT)
    done = subprocess.run([sys.executable, str(script), str(target)], capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    assert lines[0] == str(errno.EFBIG) and str(target) in lines[1] and "file too large" in lines[1], lines
    assert "enforce fail" not in lines[1]
    assert _tmp_files(tmp_path) == [] and target.read_bytes() == b"the old file"


def test_a_save_into_a_folder_it_may_not_write_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write into any folder")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(OSError, match=r"cannot save .*att\.pt: permission denied; nothing was written"):
            records.save(_records(8), folder / "att.pt")
    finally:
        folder.chmod(0o755)
