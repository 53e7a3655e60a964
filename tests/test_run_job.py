"""The main job talks and is incremental, and never keeps a stale site.

* ``scripts/site.py``'s :func:`input_stamp` changes whenever any input of the site changes (a page,
  a translation catalogue, a template, a notebook, README.md, a package source the API pages read,
  a file added, removed or renamed, the build's options, the tools' versions) and only then;
  :func:`site_is_current` keeps a site only when its stamp matches; ``build(force=False)`` keeps
  such a site without running Sphinx.
* ``scripts/run.sh`` prints a line per step with the elapsed time and "still ..." lines during a
  long step, and skips the installs on a re-run when constraints.txt, pyproject.toml and the torch
  pin are unchanged (run on a copy of the scripts with a stand-in venv whose ``python`` and
  ``hypviz`` record their arguments: nothing is installed or built); a SIGINT or SIGTERM stops it at once,
  with the processes of the step it was running, and exit status 130 or 143.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_site_script_stamp", ROOT / "scripts" / "site.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)

TOOLS = ["sphinx==9.0.4", "myst-nb==1.4.0"]


def _inputs(tmp_path: Path) -> dict[str, Path]:
    """A small copy of the site's inputs: docs/ (a page, conf.py, a catalogue), two notebooks, README, a package."""
    docs, nbs, pkg = tmp_path / "docs", tmp_path / "notebooks", tmp_path / "hypviz"
    (docs / "locale" / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    (docs / "_templates").mkdir()
    (docs / "conf.py").write_text("project = 'x'\n")
    (docs / "index.md").write_text("# Title\n")
    (docs / "_templates" / "author.html").write_text("<p>by</p>\n")
    (docs / "locale" / "zh_CN" / "LC_MESSAGES" / "index.po").write_text('msgid "Title"\nmsgstr "标题"\n', encoding="utf-8")
    nbs.mkdir()
    (nbs / "01_a.ipynb").write_text('{"cells": []}')
    (nbs / "02_b.ipynb").write_text('{"cells": [1]}')
    (tmp_path / "README.md").write_text("# readme\n")
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    return {"docs": docs, "notebooks_dir": nbs, "readme": tmp_path / "README.md", "package": pkg}


def _stamp(paths: dict[str, Path], **kw) -> str:
    return site.input_stamp(paths["docs"], paths["notebooks_dir"], paths["readme"], paths["package"],
                            options=kw.get("options", ""), tools=kw.get("tools", TOOLS))


CHANGES = {
    "a page edited": lambda p: (p["docs"] / "index.md").write_text("# Title!\n"),
    "conf.py edited": lambda p: (p["docs"] / "conf.py").write_text("project = 'y'\n"),
    "a template edited": lambda p: (p["docs"] / "_templates" / "author.html").write_text("<p>par</p>\n"),
    "a catalogue edited": lambda p: (p["docs"] / "locale" / "zh_CN" / "LC_MESSAGES" / "index.po").write_text(
        'msgid "Title"\nmsgstr "题目"\n', encoding="utf-8"),
    "a page added": lambda p: (p["docs"] / "new.md").write_text("# New\n"),
    "a page renamed": lambda p: (p["docs"] / "index.md").rename(p["docs"] / "start.md"),
    "a notebook edited": lambda p: (p["notebooks_dir"] / "01_a.ipynb").write_text('{"cells": [2]}'),
    "a notebook added": lambda p: (p["notebooks_dir"] / "03_c.ipynb").write_text("{}"),
    "a notebook removed": lambda p: (p["notebooks_dir"] / "02_b.ipynb").unlink(),
    "README edited": lambda p: p["readme"].write_text("# readme 2\n"),
    "a package source edited": lambda p: (p["package"] / "__init__.py").write_text("x = 2\n"),
    "a package module added": lambda p: (p["package"] / "more.py").write_text(""),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_changed_input_changes_the_stamp(tmp_path, change):
    paths = _inputs(tmp_path)
    before = _stamp(paths)
    assert _stamp(paths) == before  # deterministic
    CHANGES[change](paths)
    assert _stamp(paths) != before, f"{change}: the stamp did not change, a stale site would be kept"


def test_the_stamp_follows_options_and_tools_but_not_caches(tmp_path):
    paths = _inputs(tmp_path)
    before = _stamp(paths)
    assert _stamp(paths, options="warnings_as_errors=False") != before
    assert _stamp(paths, tools=["sphinx==9.0.5", "myst-nb==1.4.0"]) != before
    # caches and checkpoints, and files that are not NN_*.ipynb notebooks, are not inputs
    (paths["docs"] / "__pycache__").mkdir()
    (paths["docs"] / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (paths["docs"] / "_build").mkdir()
    (paths["docs"] / "_build" / "old.html").write_text("x")
    (paths["notebooks_dir"] / "scratch.ipynb").write_text("{}")
    (paths["package"] / "__pycache__").mkdir()
    (paths["package"] / "__pycache__" / "m.pyc").write_bytes(b"\0")
    assert _stamp(paths) == before
    # the same bytes under another name are another input
    (paths["notebooks_dir"] / "02_b.ipynb").rename(paths["notebooks_dir"] / "02_c.ipynb")
    assert _stamp(paths) != before


def test_the_repository_stamp_sees_a_catalogue_and_a_notebook():
    """The defaults cover the real inputs: docs/ with its catalogues, the notebooks, README, hypviz/."""
    po = sorted((ROOT / "docs" / "locale").rglob("*.po"))
    assert po, "no translation catalogues under docs/locale"
    stamp = site.input_stamp(tools=TOOLS)
    assert stamp == site.input_stamp(tools=TOOLS) and len(stamp) == 64


def _fake_site(out: Path, stamp: str | None, zh: bool = True) -> None:
    (out / "zh_CN").mkdir(parents=True)
    (out / "index.html").write_text("<html>old</html>")
    if zh:
        (out / "zh_CN" / "index.html").write_text("<html>旧</html>", encoding="utf-8")
    if stamp is not None:
        (out / site.STAMP_NAME).write_text(stamp + "\n")


def test_a_site_is_kept_only_with_the_same_stamp(tmp_path):
    assert not site.site_is_current(tmp_path / "none", "0" * 64)
    _fake_site(tmp_path / "a", "ab" * 32)
    assert site.site_is_current(tmp_path / "a", "ab" * 32)
    assert not site.site_is_current(tmp_path / "a", "cd" * 32)
    _fake_site(tmp_path / "b", None)
    assert not site.site_is_current(tmp_path / "b", "ab" * 32)  # a site without a stamp is rebuilt
    _fake_site(tmp_path / "c", "ab" * 32, zh=False)
    assert not site.site_is_current(tmp_path / "c", "ab" * 32)  # half a site is rebuilt


def test_build_keeps_an_unchanged_site_without_sphinx_running(tmp_path):
    pytest.importorskip("sphinx")
    paths = _inputs(tmp_path)
    out = tmp_path / "html"
    stamp = site.input_stamp(paths["docs"], paths["notebooks_dir"], paths["readme"], options="warnings_as_errors=True")
    _fake_site(out, stamp)
    said: list[str] = []
    index = site.build(out, docs=paths["docs"], notebooks_dir=paths["notebooks_dir"], readme=paths["readme"],
                       force=False, log=said.append)
    assert index == out.resolve() / "index.html"
    assert len(said) == 1 and "unchanged, kept" in said[0], said
    assert (out / "index.html").read_text() == "<html>old</html>"


# --------------------------------------------------------------------------- the main job
STUB_PYTHON = """#!/usr/bin/env bash
echo "python $*" >> "$HYPVIZ_STUB_LOG"
case "$*" in
  *sys.version*) echo "3.x stand-in" ;;
  *scripts/site.py*) sleep "${HYPVIZ_STUB_SLEEP:-0}"; echo "site: stand-in" ;;
esac
exit 0
"""
STUB_HYPVIZ = """#!/usr/bin/env bash
echo "hypviz $*" >> "$HYPVIZ_STUB_LOG"
exit 0
"""


@pytest.fixture()
def job(tmp_path):
    """A copy of the main job's scripts and pin files, and a stand-in venv; returns a runner."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("scripts/run.sh", "scripts/setup.sh", "constraints.txt", "pyproject.toml"):
        shutil.copyfile(ROOT / name, repo / name)
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    for name, text in (("python", STUB_PYTHON), ("hypviz", STUB_HYPVIZ)):
        (venv / name).write_text(text)
        (venv / name).chmod(0o755)
    log = tmp_path / "calls.log"

    def run(**env) -> tuple[str, list[str]]:
        log.write_text("")
        full = {k: v for k, v in os.environ.items() if k not in ("HYPVIZ_REINSTALL", "HYPVIZ_TICK")}
        full.update(HYPVIZ_STUB_LOG=str(log), HYPVIZ_VENV=".venv", **env)
        done = subprocess.run(["bash", "scripts/run.sh"], cwd=repo, env=full, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout, log.read_text().splitlines()

    run.repo = repo
    return run


def _installs(calls: list[str]) -> list[str]:
    return [c for c in calls if "-m pip install" in c]


def test_the_main_job_skips_unchanged_installs(job):
    out, calls = job()
    assert _installs(calls), "the first run did not install"
    assert any("scripts/site.py" in c for c in calls) and any(c.startswith("hypviz demo") for c in calls)
    steps = [line for line in out.splitlines() if line.startswith("hypviz [")]
    assert any("step 1/3" in s for s in steps) and any("step 3/3" in s for s in steps) and any("done" in s for s in steps), out
    out, calls = job()
    assert not _installs(calls), f"a re-run with nothing changed installed again: {calls}"
    assert "installs skipped" in out
    with (job.repo / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    out, calls = job()
    assert _installs(calls), "pyproject.toml changed but the installs were skipped"
    out, calls = job()
    assert not _installs(calls)
    text = (job.repo / "constraints.txt").read_text()
    (job.repo / "constraints.txt").write_text(text + "\n")
    _, calls = job()
    assert _installs(calls), "constraints.txt changed but the installs were skipped"
    _, calls = job(HYPVIZ_REINSTALL="1")
    assert _installs(calls), "HYPVIZ_REINSTALL=1 did not install"


def test_the_main_job_talks_during_a_long_step(job):
    job()  # installs once
    out, _ = job(HYPVIZ_TICK="1", HYPVIZ_STUB_SLEEP="3.5")
    still = [line for line in out.splitlines() if "still building the site" in line]
    assert len(still) >= 2, out
    assert all(line.startswith("hypviz [") and "s]" in line for line in still), still


STUB_PYTHON_BUSY = """#!/usr/bin/env bash
echo "python $*" >> "$HYPVIZ_STUB_LOG"
case "$*" in
  *sys.version*) echo "3.x stand-in" ;;
  *scripts/site.py*) sleep 300 & echo "site step $$ $!" >> "$HYPVIZ_STUB_LOG"; wait ;;
esac
exit 0
"""


def _ended(pid: int, wait_s: float = 20.0) -> bool:
    """The process ``pid`` has ended (absent, or a zombie waiting to be reaped) within ``wait_s`` seconds."""
    end = time.monotonic() + wait_s
    while True:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        except OSError:  # no /proc
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_main_job_and_its_step_at_once(job, sig):
    """SIGINT or SIGTERM to the job during the site step: the step's processes are ended (its whole process group),
    no later step runs, and the job exits 130 or 143 (a stand-in step that would run for 5 minutes)."""
    job()  # installs once
    (job.repo / ".venv" / "bin" / "python").write_text(STUB_PYTHON_BUSY)
    log = job.repo.parent / "calls.log"
    log.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("HYPVIZ_REINSTALL", "HYPVIZ_TICK")}
    env.update(HYPVIZ_STUB_LOG=str(log), HYPVIZ_VENV=".venv")
    proc = subprocess.Popen(["bash", "scripts/run.sh"], cwd=job.repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a SIGINT pytest ignores
    try:
        end = time.monotonic() + 120
        while not any(line.startswith("site step") for line in log.read_text().splitlines()):
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.05)
        started = next(line for line in log.read_text().splitlines() if line.startswith("site step"))
        step, sleeper = (int(x) for x in started.split()[2:])
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the job did not stop: end it and what it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            try:
                os.killpg(step, signal.SIGKILL)  # the step's own process group (an older run.sh: none)
            except (NameError, ProcessLookupError):
                pass
    assert proc.returncode == 128 + sig, out
    assert f"stopped by {signal.Signals(sig).name} (exit status {128 + sig})" in out, out
    assert _ended(step) and _ended(sleeper), "the site step's processes still run"
    calls = log.read_text()
    assert "hypviz demo" not in calls and "step 3/3" not in out, out
