"""The test command itself (scripts/test.sh, tests/conftest.py): its order, its quick tier, its workers."""

from __future__ import annotations

import re
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parent.parent
TEST_SH = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")


def test_every_file_the_order_and_the_quick_tier_name_exists():
    """A renamed file would silently leave the quick tier, or lose its place at the front."""
    for path in (*conftest.FIRST, *conftest.QUICK):
        assert (ROOT / path).exists(), f"tests/conftest.py names {path}, which does not exist"
    assert len(set(conftest.FIRST)) == len(conftest.FIRST)
    assert not set(conftest.FIRST) & set(conftest.QUICK), "a file both among the longest and in the quick tier"


def test_the_perturbed_runs_go_first_and_each_file_keeps_its_place():
    ranks = {path: conftest._rank(path) for path in (
        "tests/test_portability.py", "tests/test_site.py", "tests/test_browser.py", "notebooks/01_lorentzian_inner_product.ipynb",
        "notebooks/02_squared_lorentzian_distance.ipynb", "tests/test_lorentz.py", "tests/test_kinds.py")}
    assert ranks["tests/test_portability.py"] == 0
    assert ranks["tests/test_site.py"] < ranks["tests/test_browser.py"] < ranks["notebooks/01_lorentzian_inner_product.ipynb"]
    assert ranks["notebooks/01_lorentzian_inner_product.ipynb"] == ranks["notebooks/02_squared_lorentzian_distance.ipynb"]
    assert ranks["tests/test_lorentz.py"] == ranks["tests/test_kinds.py"] == len(conftest.FIRST)


def test_the_command_spreads_whole_files_over_workers_in_the_given_order():
    command = TEST_SH.split("exec ", 1)[1]
    assert re.search(r"-n \"\$workers\"", command) and "--dist loadfile" in command
    assert "--no-loadscope-reorder" in command, "without it xdist reorders the files by their number of tests"
    assert "tests notebooks" in command and "--nbval " in command


def test_the_quick_marker_is_registered():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^\s*"quick: ', text, re.M)


def test_the_command_runs_the_examples_of_the_doctested_packages():
    """scripts/test.sh doctests exactly the folders DOCTESTED names (and tests/test_examples_present.py checks)."""
    command = TEST_SH.split("exec ", 1)[1]
    assert "--doctest-modules" in command
    paths = command.split("pytest ", 1)[1].split("\\", 1)[0].split()
    assert [f"{p}/" for p in paths if p.startswith("hypviz/")] == list(conftest.DOCTESTED)
    for folder in conftest.DOCTESTED:
        assert (ROOT / folder / "__init__.py").exists(), f"DOCTESTED names {folder}, not a package of hypviz"
