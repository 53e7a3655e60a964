"""Paths and streams a hostile (or unlucky) user may hand ``hypviz compare``, and what publishing promises.

* ``--force`` never deletes an input or the current folder, whichever symbolic links, ``..`` or second names
  lead to them: every comparison is made on resolved paths.  The matrix below covers inputs, ``--out`` and the
  current folder reached through a link, for both forms of the command (QUERIES KEYS, and a capture file).
* Temporary folders of killed runs (``.NAME.tmp-*``) are removed by the next run once nobody holds their lock;
  a previous report left in ``.NAME.old-*`` is reported and kept; an old report that cannot be removed after
  ``--force`` is said.
* After publishing, a stdout that fails (``>/dev/full``, a closed pipe, no stdout at all) leaves exit code 0
  and one line on stderr saying that the report is complete.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from hypviz import cli, data
from hypviz.base import messages
from hypviz.capture import records
from hypviz.reports import input_files, publishing

ENV = {k: v for k, v in os.environ.items() if k not in ("HYPVIZ_DEBUG", publishing.PAUSE_ENV, input_files.MAX_INPUT_ENV)}
ENV.update(MPLBACKEND="Agg", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
FAST = ("--kinds", "spatial", "--sample-rows", "4", "--device", "cpu")


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if re.match(r"^\..*\.(tmp|old)-", p.name))


def _old_report(folder: Path, tag: str = "old") -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"generator": "hypviz", "tag": tag}))
    (folder / "report.html").write_text(f"<p>{tag}</p>")


@pytest.fixture(scope="module")
def pts():
    q = data.lifted_gaussian((2, 12), 3, 1.0, seed=1, dtype=torch.float32)
    k = data.lifted_gaussian((2, 10), 3, 1.0, seed=2, dtype=torch.float32)
    return q, k


@pytest.fixture()
def tree(tmp_path, pts):
    """``base/a/real/rep``: an old report holding the user's inputs; ``base/link -> a/real``; ``base/k.npy``."""
    q, k = pts
    base = tmp_path / "base"
    rep = base / "a" / "real" / "rep"
    _old_report(rep)
    np.save(rep / "myqueries.npy", q.numpy())
    np.save(base / "k.npy", k.numpy())
    rec = records.LayerRecord(name="l0", queries=q[:1], keys=k[:1], values=None, k=1.0, mode="generic",
                              kind="distance", temperature=1.0)
    records.save([rec], rep / "capture.pt")
    (base / "link").symlink_to(Path("a") / "real")
    (base / "qlink.npy").symlink_to(rep / "myqueries.npy")  # a link to the input inside the report
    return base


def _snapshot(rep: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(rep.iterdir())}


# (input as given, --out as given, current folder relative to base); "Q" is replaced by the input's name
MATRIX = {
    "input through the link, --out real": ("link/rep/Q", "a/real/rep", "."),
    "input real, --out through the link": ("a/real/rep/Q", "link/rep", "."),
    "both through the link": ("link/rep/Q", "link/rep", "."),
    "a symlinked input file": ("qlink.npy", "a/real/rep", "."),
    "--out with .. after the link": ("a/real/rep/Q", "link/../real/rep", "."),  # lexically base/real/rep
    "--out through the link, absolute": ("a/real/rep/Q", "{base}/link/rep", "."),
    "current folder inside, --out through the link": ("{base}/k.npy", "{base}/link/rep", "link/rep"),
    "current folder inside, --out relative": ("{base}/k.npy", "../rep", "a/real/rep"),
    "current folder inside through the link, --out real": ("{base}/k.npy", "{base}/a/real/rep", "link/rep"),
}


@pytest.mark.parametrize("form", ["compare", "capture"])
@pytest.mark.parametrize("case", list(MATRIX))
def test_force_never_removes_an_input_or_the_current_folder_through_links(case, form, tree, capsys, monkeypatch):
    given, out, cwd = (t.format(base=tree) for t in MATRIX[case])
    holds_input = "{base}/k.npy" not in MATRIX[case][0]
    if form == "capture" and given == "qlink.npy":
        (tree / "caplink.pt").symlink_to(tree / "a" / "real" / "rep" / "capture.pt")
        given = "caplink.pt"
    given = given.replace("Q", "myqueries.npy" if form == "compare" else "capture.pt")
    if form == "capture" and not holds_input:
        given = str(tree / "a" / "real" / "rep" / "capture.pt")  # the current folder is the point here
        holds_input = False
    rep = tree / "a" / "real" / "rep"
    before = _snapshot(rep)
    monkeypatch.chdir(tree / cwd)
    args = ["compare", given] + ([str(tree / "k.npy")] if form == "compare" else []) + ["--out", out, "--force", *FAST]
    if form == "capture":
        args = [a for a in args if a not in ("--kinds", "spatial", "--sample-rows", "4")]
    code, stdout, err = run(capsys, *args)
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, (code, err)
    what = "which holds the input" if holds_input else "which holds the current folder"
    assert f"--force would replace {rep}, {what}" in err, err
    assert _snapshot(rep) == before, "the old report (and the input in it) changed"
    assert leftovers(rep.parent) == [] and leftovers(tree) == []


def test_force_through_a_link_replaces_the_report_when_no_input_is_in_it(tree, capsys, pts, monkeypatch):
    q, _ = pts
    np.save(tree / "q.npy", q.numpy())
    other = tree / "a" / "real" / "other"
    _old_report(other)
    monkeypatch.chdir(tree)
    code, stdout, err = run(capsys, "compare", "q.npy", "k.npy", "--out", "link/other", "--force", *FAST)
    assert code == 0 and err == "", err
    meta = json.loads((other / "metrics.json").read_text())
    assert meta["generator"] == "hypviz" and "tag" not in meta  # the new report, at the resolved place
    assert f"report: {other}/report.html" in stdout
    assert leftovers(other.parent) == []


def test_check_out_resolves_the_parent_but_refuses_a_link_as_out(tree):
    assert publishing.resolved_out(tree / "link" / "rep") == tree / "a" / "real" / "rep"
    assert publishing.resolved_out(tree / "link" / ".." / "rep") == tree / "a" / "rep"  # as the kernel resolves ..
    (tree / "replink").symlink_to(tree / "a" / "real" / "rep")
    with pytest.raises(messages.UsageError, match="a symbolic link, not a folder; not replacing it"):
        publishing.check_out(tree / "replink", force=True)
    assert (tree / "a" / "real" / "rep" / "myqueries.npy").exists()


# --------------------------------------------------------------------------- #
# temporary folders of earlier runs, an old report that cannot be removed
# --------------------------------------------------------------------------- #
def _aged(path: Path, seconds: float) -> Path:
    t = time.time() - seconds
    os.utime(path, (t, t))
    return path


def test_stale_temporary_folders_are_removed_or_reported(tmp_path, pts, capsys):
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    out = tmp_path / "r"
    stale = tmp_path / ".r.tmp-abcd1234"  # left by a SIGKILLed run: nobody holds its lock
    stale.mkdir()
    (stale / "report.html").write_text("half")
    _aged(stale, 3600)
    fresh = tmp_path / ".r.tmp-fresh123"  # unlocked but just made: perhaps a run that has not locked it yet
    fresh.mkdir()
    live = tmp_path / ".r.tmp-live1234"  # a run in progress holds its lock
    live.mkdir()
    _aged(live, 3600)
    aside = tmp_path / ".r.old-zzzz9999"  # a previous report, left between two renames
    _old_report(aside / "r")
    other = tmp_path / ".other.tmp-abcd1234"  # another --out's: not ours to touch
    other.mkdir()
    _aged(other, 3600)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, stdout, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--out", out, *FAST)
    finally:
        os.close(fd)
    assert code == 0 and (out / "metrics.json").exists(), err
    lines = err.strip().splitlines()
    assert len(lines) == 3, err
    assert not stale.exists() and f"removed 1 temporary folder(s) that interrupted runs left beside {out}: .r.tmp-abcd1234" in err
    assert fresh.exists() and ".r.tmp-fresh123" in err
    assert "1 temporary folder(s) of another run, in progress or interrupted" in err
    assert live.exists() and ".r.tmp-live1234" not in err
    assert (aside / "r" / "metrics.json").exists() and f"left the previous report in {aside}" in err
    assert other.exists()


def test_an_old_report_that_cannot_be_removed_is_said(tmp_path, pts, capsys, monkeypatch):
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    _old_report(tmp_path / "r")
    real_rmtree = shutil.rmtree

    def stubborn(path, *args, **kwargs):  # the old report (now at the temporary name) resists, as on a read-only mount
        path = Path(path)
        if path.name.startswith(".r.tmp-") and (path / "metrics.json").exists() and "old" in (path / "report.html").read_text():
            handler = kwargs.get("onexc") or kwargs.get("onerror")
            err = PermissionError(13, "Permission denied", str(path / "metrics.json"))
            handler(os.unlink, str(path / "metrics.json"), err if "onexc" in kwargs else (PermissionError, err, None))
            return
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(publishing.shutil, "rmtree", stubborn)
    code, stdout, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--out", tmp_path / "r", "--force", *FAST)
    monkeypatch.undo()
    assert code == 0, err
    left = leftovers(tmp_path)
    assert len(left) == 1 and "tmp" in left[0]
    assert err.strip() == (f"hypviz compare: the old report (replaced by the new one) is left in {tmp_path / left[0]}: "
                           "it could not be removed (Permission denied); remove it yourself")
    assert "tag" not in json.loads((tmp_path / "r" / "metrics.json").read_text())  # the new report is in place


# --------------------------------------------------------------------------- #
# stdout failing after publishing
# --------------------------------------------------------------------------- #
def _spawn(tmp_path: Path, pts, stdout, **kw) -> subprocess.Popen:
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    return subprocess.Popen([sys.executable, "-m", "hypviz.cli", "compare", "q.npy", "k.npy", "--out", "r", *FAST],
                            cwd=tmp_path, env=ENV, stdout=stdout, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("stream", ["/dev/full", "closed pipe", "no stdout"])
def test_a_failing_stdout_after_publishing_is_exit_0_and_says_the_report_is_complete(stream, tmp_path, pts):
    if stream == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    if stream == "/dev/full":
        with open("/dev/full", "w") as full:
            proc = _spawn(tmp_path, pts, full)
            err = proc.communicate(timeout=120)[1]
        reason = "No space left on device"
    elif stream == "closed pipe":
        proc = _spawn(tmp_path, pts, subprocess.PIPE)
        proc.stdout.close()  # nobody reads: the summary's write fails with EPIPE
        err = proc.stderr.read()
        proc.wait(timeout=120)
        reason = "Broken pipe"
    else:
        proc = _spawn(tmp_path, pts, subprocess.DEVNULL, preexec_fn=lambda: os.close(1))  # started with fd 1 closed
        err = proc.communicate(timeout=120)[1]
        reason = ""
    assert proc.returncode == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "Exception ignored" not in err, err
    assert lines[0].startswith(f"hypviz compare: the report in {tmp_path / 'r'} is complete; its summary could not be "
                               "printed on stdout"), err
    assert reason in lines[0]
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert meta["generator"] == "hypviz" and (tmp_path / "r" / "report.html").exists()
    assert leftovers(tmp_path) == []


def test_a_sigkilled_runs_temporary_folder_is_removed_by_the_next_run(tmp_path, pts, capsys):
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    proc = subprocess.run([sys.executable, "-m", "hypviz.cli", "compare", "q.npy", "k.npy", "--out", "r", *FAST],
                          cwd=tmp_path, env={**ENV, publishing.PAUSE_ENV: "written:KILL"}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -9 and not (tmp_path / "r").exists()
    left = leftovers(tmp_path)
    assert len(left) == 1 and left[0].startswith(".r.tmp-")  # nothing could clean up after SIGKILL
    assert (tmp_path / left[0] / "metrics.json").exists()  # the report was written, not published
    _aged(tmp_path / left[0], 3600)  # the kernel released its lock when the process died
    code, stdout, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--out", tmp_path / "r", *FAST)
    assert code == 0 and leftovers(tmp_path) == [] and (tmp_path / "r" / "metrics.json").exists()
    assert err.strip() == (f"hypviz compare: removed 1 temporary folder(s) that interrupted runs left beside "
                           f"{tmp_path / 'r'}: {left[0]}")


def _private_mounts() -> bool:
    """Whether this machine lets an unprivileged-looking child make its own mount namespace (``unshare -rm``)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _private_mounts(), reason="no private mount namespace (unshare -rm) here")
def test_force_never_removes_an_input_reached_through_a_bind_mount(tree):
    # the same folder under a second name no path comparison can see: found by (device, inode)
    second = tree / "second"
    second.mkdir()
    rep = tree / "a" / "real" / "rep"
    before = _snapshot(rep)
    script = (f"mount --bind {tree / 'a'} {second} && exec {sys.executable} -m hypviz.cli compare "
              f"{second / 'real' / 'rep' / 'myqueries.npy'} {tree / 'k.npy'} --out {rep} --force {' '.join(FAST)}")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"hypviz compare: error: --force would replace {rep}, which holds the input "
                                   f"{second / 'real' / 'rep' / 'myqueries.npy'}; copy the input elsewhere first")
    assert _snapshot(rep) == before


# --------------------------------------------------------------------------- #
# --force on a mount point: one line, exit 2, the old report kept
# --------------------------------------------------------------------------- #
def _report_with_inputs(tmp_path: Path, pts) -> tuple[Path, Path, Path]:
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    rep = tmp_path / "rep"
    _old_report(rep)
    return tmp_path / "q.npy", tmp_path / "k.npy", rep


@pytest.mark.parametrize("path", ["exchange", "two renames"])
def test_a_rename_refused_as_busy_is_one_line_and_keeps_the_old_report(path, tmp_path, pts, capsys, monkeypatch):
    import errno

    qp, kp, rep = _report_with_inputs(tmp_path, pts)
    before = _snapshot(rep)

    def busy_exchange(old, new, flags):
        if flags == publishing.RENAME_EXCHANGE:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(old), None, str(new))
        return False

    real_replace = os.replace

    def busy_replace(src, dst):
        if Path(src) == rep:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))
        return real_replace(src, dst)

    if path == "exchange":
        monkeypatch.setattr(publishing, "_rename2", busy_exchange)
    else:
        monkeypatch.setattr(publishing, "_rename2", lambda old, new, flags: False)
        monkeypatch.setattr(publishing.os, "replace", busy_replace)
    code, out, err = run(capsys, "compare", qp, kp, *FAST, "--out", rep, "--force", "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"cannot write the report {rep}" in err and "(EBUSY)" in err and "nothing written" in err
    assert _snapshot(rep) == before and leftovers(tmp_path) == []


def test_an_out_that_is_a_mount_point_is_refused_before_any_work(tmp_path, pts, capsys, monkeypatch):
    qp, kp, rep = _report_with_inputs(tmp_path, pts)
    before = _snapshot(rep)
    real = os.path.ismount
    monkeypatch.setattr(publishing.os.path, "ismount", lambda p: Path(p) == rep or real(p))
    code, out, err = run(capsys, "compare", qp, kp, *FAST, "--out", rep, "--force")
    assert code == 2 and err.strip() == (f"hypviz compare: error: --force cannot replace {rep}: it is a mount point, "
                                         "which cannot be renamed; choose an --out inside it or elsewhere")
    assert _snapshot(rep) == before and leftovers(tmp_path) == []


@pytest.mark.skipif(not _private_mounts(), reason="no private mount namespace (unshare -rm) here")
@pytest.mark.parametrize("mount", ["bind", "tmpfs"])
def test_force_on_a_real_mount_point_is_one_line_and_keeps_it(mount, tmp_path, pts):
    # a folder bind-mounted on itself is no mount point to os.path.ismount (same device): the rename's EBUSY is
    # what refuses it; a tmpfs is seen as one before any work
    qp, kp, rep = _report_with_inputs(tmp_path, pts)
    mount_cmd = f"mount --bind {rep} {rep}" if mount == "bind" else f"mount -t tmpfs none {rep}"
    script = (f"{mount_cmd} && {sys.executable} -m hypviz.cli compare {qp} {kp} --out {rep} --force "
              f"{' '.join(FAST)} --no-progress; code=$?; ls -A {rep}; exit $code")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if mount == "bind":
        assert "(EBUSY)" in proc.stderr and "nothing written" in proc.stderr
        assert proc.stdout.split() == ["metrics.json", "report.html"]  # the old report, as seen through the mount
    else:
        assert "it is a mount point" in proc.stderr and proc.stdout.split() == []
    assert sorted(p.name for p in rep.iterdir()) == ["metrics.json", "report.html"] and leftovers(tmp_path) == []
