"""Every public function and class of lorentz, attention, capture and symbolic shows how it is called, in an
example that runs.

A public name (a function or class in the package's ``__all__``) needs a numpy-style ``Examples`` section with
at least one ``>>>`` line, in a docstring the test command runs: defined in a module of a folder that
``scripts/test.sh`` runs with ``--doctest-modules`` (``DOCTESTED`` of ``tests/conftest.py``; a name re-exported
from anywhere else would not be run) and found there by :class:`doctest.DocTestFinder`.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
import sys
from typing import Any

import pytest

import conftest

PACKAGES = ["hypviz.lorentz", "hypviz.attention", "hypviz.capture", "hypviz.symbolic"]
#: The packages the test command doctests.
RUN = tuple(folder.rstrip("/").replace("/", ".") for folder in conftest.DOCTESTED)
#: A numpy-style section: its name, then a line of dashes at the same indentation.
SECTION = re.compile(r"^([ \t]*)(\w[\w ]*)\n\1-{3,}[ \t]*$", re.M)


def examples_section(doc: str) -> str | None:
    """The text of the docstring's ``Examples`` section (up to the next section), or None when it has none."""
    heads = list(SECTION.finditer(inspect.cleandoc(doc)))
    for i, head in enumerate(heads):
        if head.group(2) == "Examples":
            text = inspect.cleandoc(doc)
            return text[head.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
    return None


def public_objects(package: str) -> list[tuple[str, Any]]:
    module = importlib.import_module(package)
    return [(name, getattr(module, name)) for name in module.__all__
            if inspect.isfunction(getattr(module, name)) or inspect.isclass(getattr(module, name))]


def missing_examples(package: str) -> list[str]:
    """The public functions and classes of ``package`` without an Examples section that ``--doctest-modules`` runs."""
    missing = []
    for name, obj in public_objects(package):
        home = obj.__module__
        if not (home in RUN or home.startswith(tuple(p + "." for p in RUN))):
            missing.append(f"{name} (defined in {home}, which the test command does not doctest)")
            continue
        section = examples_section(obj.__doc__ or "")
        if section is None or not doctest.DocTestParser().get_examples(section):
            missing.append(f"{name} (no Examples section with a >>> line)")
            continue
        found = {t.name: len(t.examples) for t in doctest.DocTestFinder().find(sys.modules[home])}
        if not found.get(f"{home}.{obj.__qualname__}"):
            missing.append(f"{name} (its examples are not found by doctest in {home})")
    return missing


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_function_and_class_has_examples_that_run(package):
    assert public_objects(package), f"{package} has no public function or class"
    missing = missing_examples(package)
    assert not missing, f"{package}: " + "; ".join(missing)


def test_the_check_sees_a_missing_or_empty_examples_section():
    """The section is read by its heading, up to the next section; prose without ``>>>`` is not an example."""
    def documented():
        """One line.

        Examples
        --------
        >>> 1 + 1
        2
        """

    def prose_only():
        """One line.

        Examples
        --------
        Call it with two points.

        Raises
        ------
        ValueError
            >>> not an example of this section
        """

    assert doctest.DocTestParser().get_examples(examples_section(documented.__doc__))
    assert not doctest.DocTestParser().get_examples(examples_section(prose_only.__doc__))
    assert examples_section("One line.\n\nReturns\n-------\nint\n") is None
