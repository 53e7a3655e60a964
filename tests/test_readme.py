"""The README as a newcomer reads it: its Python snippets run in one session, in order, and the
notebooks, files and commands it names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_python_snippets_run_in_order_in_one_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # torch.save writes qk.pt here
    snippets = blocks("python")
    assert len(snippets) >= 3
    namespace: dict = {"__name__": "__readme__"}
    for i, code in enumerate(snippets):
        try:
            exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"README python block {i + 1} fails: {type(exc).__name__}: {exc}\n{code}")
    assert (tmp_path / "qk.pt").is_file()


def test_the_notebook_table_names_exactly_the_notebooks():
    named = set(re.findall(r"^\| `(\d\d_[a-z_]+)` \|", README, flags=re.M))
    present = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert named == present, (sorted(named - present), sorted(present - named))


def test_files_and_scripts_it_names_exist():
    for rel in re.findall(r"\]\((docs/[^)]+)\)", README) + ["scripts/run.sh", "scripts/test.sh", "environment.yml"]:
        assert (ROOT / rel).is_file(), rel
    for cmd in re.findall(r"^\.venv/bin/(\w+)", "\n".join(blocks("bash")), flags=re.M):
        assert cmd in {"python", "jupyter", "hypviz"}, cmd
    # every Markdown file the README names is in the repository (no citations of files it does not have)
    for name in set(re.findall(r"\b([\w./-]+\.md)\b", README)):
        assert (ROOT / name).is_file(), f"README cites {name}, which the repository does not have"
