"""The reports' entries, one per sub-command (:mod:`hypviz.reports.runs`), and a command that only parses and prints.

Each command of :mod:`hypviz.cli.command` checks its options, makes ONE call into :mod:`hypviz.reports.runs` and
prints the lines it returns (read from the module's syntax tree, so a command that starts orchestrating again
fails here); the entries, called directly, write the report the command writes and return the lines it prints,
and refuse bad input in one line before anything is written.  Inputs are small (8 queries x 6 keys, d = 3).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hypviz.reports as reports
from hypviz import cli, data
from hypviz.base.messages import UsageError
from hypviz.cli import command
from hypviz.reports import input_files, runs
from hypviz.reports.inputs import Settings

COMMAND = Path(command.__file__)


def _commands() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(COMMAND.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("cmd_")}


def _calls(fn: ast.FunctionDef) -> list[str]:
    """The dotted names ``fn`` calls (``runs.compare_report``, ``say``, ``cmd_model``, ...)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                out.append(f"{f.value.id}.{f.attr}")
            elif isinstance(f, ast.Name):
                out.append(f.id)
    return out


def test_each_command_makes_one_call_into_the_reports_and_prints():
    commands = _commands()
    assert set(commands) == {"cmd_compare", "cmd_model", "cmd_demo"}
    entries = {"cmd_compare": "runs.compare_report", "cmd_model": "runs.capture_report", "cmd_demo": "runs.demo_report"}
    for name, fn in commands.items():
        calls = _calls(fn)
        into_reports = [c for c in calls if c.startswith("runs.")]
        assert into_reports == [entries[name]], (name, calls)
        assert calls.count("say") == 1, (name, calls)  # what the report returned, printed once
    # the command module reaches the reports only through runs (the entries), publishing (signals, stdout) and the
    # Settings it fills: no analysis, reading, writing or publishing of its own
    imported = set()
    for node in ast.walk(ast.parse(COMMAND.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hypviz.reports"):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert imported == {"hypviz.reports.publishing", "hypviz.reports.runs", "hypviz.reports.inputs.Settings",
                        "hypviz.reports.inputs.DEMO_NORMS", "hypviz.reports.publishing.RUN",
                        "hypviz.reports.publishing.interrupted_message", "hypviz.reports.publishing.say"}
    assert reports.compare_report is runs.compare_report and reports.__all__ == runs.__all__[:4]


@pytest.fixture
def qk_file(tmp_path):
    q = data.lifted_gaussian(8, 3, 0.7, k=2.0, seed=1, dtype=torch.float64)
    kv = data.lifted_gaussian(6, 3, 0.7, k=2.0, seed=2, dtype=torch.float64)
    np.savez(tmp_path / "qk.npz", queries=q.numpy(), keys=kv.numpy(), k=np.float64(2.0))
    input_files.STORED_K.clear()
    yield tmp_path / "qk.npz"
    input_files.STORED_K.clear()


def _settings(**kw) -> Settings:
    base = dict(kinds=["spatial"], reference="distance", temperature=None, device="cpu", sample_rows=4, progress=False,
                command="compare")
    return Settings(**{**base, **kw})


def test_compare_report_writes_the_report_and_returns_what_the_command_prints(qk_file, tmp_path):
    published = runs.compare_report(qk_file, qk_file, tmp_path / "direct", _settings())
    assert published.out == tmp_path / "direct" and published.files == sorted(p.name for p in published.out.iterdir())
    assert {"report.html", "metrics.json", "rows.npz"} <= set(published.files)
    # the note on the stored curvature comes first, then the summary
    assert published.lines[0] == f"hypviz compare: using k = 2 stored in {qk_file} (pass --k to override)"
    assert published.lines[1].startswith("hypviz compare: qk.npz\n")
    meta = json.loads((published.out / "metrics.json").read_text())
    assert meta["setup"]["k"] == 2.0
    assert {name: meta["inputs"][name] for name in ("heads_axis", "dtype", "model")} == \
        {"heads_axis": None, "dtype": "auto", "model": "lorentz"}  # the input-reading options, stored

    input_files.STORED_K.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["compare", str(qk_file), str(qk_file), "--kinds", "spatial", "--sample-rows", "4",
                         "--device", "cpu", "--no-progress", "--out", str(tmp_path / "cli")])
    assert code == 0
    assert out.getvalue() == "\n".join(published.lines).replace(str(tmp_path / "direct"), str(tmp_path / "cli")) + "\n"


def test_the_entries_refuse_bad_input_in_one_line_and_write_nothing(qk_file, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("not a report")
    with pytest.raises(UsageError) as info:  # an output folder that is not a report, without --force
        runs.compare_report(qk_file, qk_file, tmp_path / "taken", _settings())
    assert "\n" not in str(info.value) and (tmp_path / "taken" / "mine.txt").exists()
    with pytest.raises(UsageError, match=r"^--temperature: temperature \S+ makes the logits overflow"):
        runs.compare_report(qk_file, qk_file, tmp_path / "r", _settings(temperature=1e-310))
    with pytest.raises(UsageError, match=r"^KEYS is missing: .*qk\.npz is not one$"):
        runs.capture_report(qk_file, tmp_path / "r")
    with pytest.raises(UsageError, match=r"^--device: "):
        runs.demo_report(tmp_path / "r", device="cuda:99")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qk.npz", "taken"]
