"""ruff and mypy over the house, as the test command runs them (their settings: pyproject.toml).

ruff checks every ``.py`` file outside ``notebooks/`` (pyflakes, pycodestyle at 130 columns, import order,
bugbear); mypy checks ``hypviz``, ``scripts``, ``benchmarks``, ``tests`` and the site's ``docs/conf.py`` and
``docs/_ext``, strictly on ``hypviz.base``, ``hypviz.lorentz`` and ``hypviz.attention``.  Each tool runs once per
test process, over the whole house.  A failure is one line: the count by rule and the first few places.

The same checks by hand::

    .venv/bin/ruff check
    .venv/bin/mypy
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: at most this many places are named in a failure's line
SHOWN = 5


def _run(tool: str, *args: str, cwd: Path = ROOT, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m tool args`` in this interpreter; a missing tool is a one-line failure naming the set-up."""
    try:
        __import__(tool)
    except ImportError:
        pytest.fail(f"{tool} is not installed in {sys.prefix}: run bash scripts/setup.sh test (the test extra installs it)")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=600)


def _rel(path: str) -> str:
    p = Path(path)
    return (p.resolve().relative_to(ROOT) if p.is_absolute() else p).as_posix()


@functools.cache
def ruff_findings() -> tuple[tuple[str, int, str, str], ...]:
    """``ruff check`` over the house: (file, line, rule, message) of each finding."""
    done = _run("ruff", "check", "--output-format", "json", "--quiet", ".")
    if done.returncode not in (0, 1):
        pytest.fail(f"ruff check failed to run (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    found = json.loads(done.stdout or "[]")
    if done.returncode == 1 and not found:
        pytest.fail(f"ruff check exited 1 without a finding: {done.stderr.strip()[-500:]}")
    return tuple((_rel(f["filename"]), f["location"]["row"], f["code"] or "syntax", f["message"]) for f in found)


@functools.cache
def mypy_findings() -> tuple[tuple[str, int, str, str], ...]:
    """``mypy`` over the files pyproject.toml names: (file, line, error code, message) of each error."""
    done = _run("mypy", "--output", "json")
    if done.returncode not in (0, 1):
        pytest.fail(f"mypy failed to run (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    errors = tuple((_rel(e["file"]), e["line"], e["code"] or "error", e["message"])
                   for e in found if e["severity"] == "error")
    if done.returncode == 1 and not errors:
        pytest.fail(f"mypy exited 1 without an error: {(done.stderr or done.stdout).strip()[-500:]}")
    return errors


def summary(tool: str, findings: list[tuple[str, int, str, str]]) -> str:
    """One line: how many, by rule, and the first :data:`SHOWN` places."""
    by_rule = ", ".join(f"{rule} {n}" for rule, n in Counter(f[2] for f in findings).most_common())
    places = "; ".join(f"{file}:{line} [{rule}] {message}" for file, line, rule, message in findings[:SHOWN])
    more = f"; ... {len(findings) - SHOWN} more" if len(findings) > SHOWN else ""
    return f"{tool}: {len(findings)} finding(s) ({by_rule}): {places}{more}".replace("\n", " ")


def test_ruff_passes():
    findings = list(ruff_findings())
    assert not findings, summary("ruff check", findings)


def test_mypy_passes():
    findings = list(mypy_findings())
    assert not findings, summary("mypy", findings)


# --------------------------------------------------------------------------- #
# the settings catch what they are meant to (a configuration that checks nothing would pass the tests above)
# --------------------------------------------------------------------------- #
PROBE = textwrap.dedent('''\
    import sys
    import os

    import pytest


    def grow(item, into=[]):
        into.append(item)
        return into


    def when(now=os.getcwd()):
        return now


    def late():
        return [lambda: i for i in range(3)]


    def test_anything():
        with pytest.raises(Exception):
            pass
        text = "{}".format(sys.argv)
        return text
''') + "LONG = 1  # a line longer than the house's 130 columns:" + " x" * 40 + "\n"


def test_ruff_settings_catch_the_rules_the_house_relies_on():
    done = _run("ruff", "check", "--output-format", "json", "--quiet", "--stdin-filename", "tests/test_probe.py", "-",
                stdin=PROBE)
    found = {f["code"] for f in json.loads(done.stdout or "[]")} if done.returncode == 1 else set()
    # import order, a mutable default, a call in a default, a too-broad raises, a closure over a loop variable
    expected = {"I001", "B006", "B008", "B017", "B023", "E501"}
    assert expected <= found, f"ruff's settings do not catch {sorted(expected - found)} (found {sorted(found)})"


def test_mypy_is_strict_on_base_lorentz_attention_and_lenient_elsewhere(tmp_path):
    # the same module names as the house's, in a scratch tree, with pyproject.toml's settings
    untyped = "def f(x):\n    return x\n\n\ndef g() -> int:\n    return f(1)\n"
    for package in ("base", "lorentz", "attention", "attention/maps", "capture", "plots"):
        folder = tmp_path / "hypviz" / package
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
        (folder / "probe.py").write_text(untyped)
    (tmp_path / "hypviz" / "__init__.py").write_text("")
    done = _run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                "--output", "json", "hypviz", cwd=tmp_path)
    flagged = {Path(e["file"]).parent.relative_to("hypviz").as_posix()
               for e in map(json.loads, filter(lambda line: line.startswith("{"), done.stdout.splitlines()))
               if e["code"] == "no-untyped-def"}
    assert flagged == {"base", "lorentz", "attention", "attention/maps"}, (
        f"mypy flags untyped functions in {sorted(flagged)}; expected base, lorentz and attention (strict) only"
    )
