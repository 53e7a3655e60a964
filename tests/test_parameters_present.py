"""Every public function and class of the enforced packages documents each of its parameters.

A public name (a function or class in the package's ``__all__``) needs a numpy-style ``Parameters``
section whose entries name exactly the parameters of :func:`inspect.signature` (``self``/``cls``,
``*args`` and ``**kwargs`` left out), in any order; an entry may name several, ``x, y : type``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest

#: The packages whose public functions and classes must have a complete Parameters section.
ENFORCED = ("hypviz.lorentz", "hypviz.data")
#: A numpy-style section: its name, then a line of dashes at the same indentation.
SECTION = re.compile(r"^([ \t]*)(\w[\w ]*)\n\1-{3,}[ \t]*$", re.M)
#: An entry of a Parameters section: a line at the section's indentation, names then `` : type``.
ENTRY = re.compile(r"^(\S[^:\n]*?)(?:\s+:\s.*|\s*:)?$")


def section(doc: str, title: str) -> str | None:
    """The text of the docstring's section ``title`` (up to the next section), or None when it has none."""
    text = inspect.cleandoc(doc)
    heads = list(SECTION.finditer(text))
    for i, head in enumerate(heads):
        if head.group(2) == title and not head.group(1):
            return text[head.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
    return None


def documented_names(doc: str) -> list[str] | None:
    """The parameter names the Parameters section lists (in order, repeats kept), or None without one."""
    body = section(doc, "Parameters")
    if body is None:
        return None
    names: list[str] = []
    for line in body.splitlines():
        if not line.strip() or line[0].isspace():
            continue  # blank, or a description line (indented under its entry)
        match = ENTRY.match(line.rstrip())
        assert match, f"not a Parameters entry: {line!r}"
        names.extend(name.strip().lstrip("*") for name in match.group(1).split(","))
    return names


def signature_names(obj: Any) -> list[str]:
    """The parameters of ``obj`` a docstring must list: no self/cls, no ``*args``/``**kwargs``."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in inspect.signature(obj).parameters.values()
            if p.kind not in variadic and p.name not in ("self", "cls")]


def public_objects(package: str) -> list[tuple[str, Any]]:
    module = importlib.import_module(package)
    return [(name, getattr(module, name)) for name in module.__all__
            if inspect.isfunction(getattr(module, name)) or inspect.isclass(getattr(module, name))]


def parameter_problems(name: str, obj: Any) -> list[str]:
    """What is wrong with the Parameters section of ``obj`` (empty when it lists exactly its parameters)."""
    listed = documented_names(obj.__doc__ or "")
    if listed is None:
        return [f"{name} (no Parameters section)"]
    expected = signature_names(obj)
    problems = []
    missing = [p for p in expected if p not in listed]
    extra = [p for p in listed if p not in expected]
    repeated = sorted({p for p in listed if listed.count(p) > 1})
    if missing:
        problems.append(f"{name} (Parameters lacks {', '.join(missing)})")
    if extra:
        problems.append(f"{name} (Parameters lists {', '.join(extra)}, not in its signature)")
    if repeated:
        problems.append(f"{name} (Parameters lists {', '.join(repeated)} more than once)")
    return problems


@pytest.mark.parametrize("package", ENFORCED)
def test_every_public_function_and_class_documents_exactly_its_parameters(package):
    objects = public_objects(package)
    assert objects, f"{package} has no public function or class"
    problems = [p for name, obj in objects for p in parameter_problems(name, obj)]
    assert not problems, f"{package}: " + "; ".join(problems)


def test_the_check_sees_missing_extra_and_grouped_parameters():
    """Entries are read at the section's indentation, several names per entry; other sections are not read."""
    def complete(x, y, n=2, *args, k=1.0, **kwargs):
        """One line.

        Parameters
        ----------
        x, y : array
            Points; the next line is a description, not an entry.
            z : not an entry either
        n : int, default 2
            Samples.
        k
            Curvature parameter.

        Returns
        -------
        q : float
            Not a parameter.
        """

    def incomplete(x, y, *, k=1.0):
        """One line.

        Parameters
        ----------
        x : array
            Points.
        w : float
            Not in the signature.
        x : array
            Again.

        Raises
        ------
        ValueError
            When k is wrong.
        """

    class Pair:
        """One line.

        Parameters
        ----------
        a, b : int
            The two halves.
        """

        def __init__(self, a, b):
            self.a, self.b = a, b

    assert documented_names(complete.__doc__) == ["x", "y", "n", "k"]
    assert signature_names(complete) == ["x", "y", "n", "k"]
    assert parameter_problems("complete", complete) == []
    assert parameter_problems("incomplete", incomplete) == [
        "incomplete (Parameters lacks y, k)",
        "incomplete (Parameters lists w, not in its signature)",
        "incomplete (Parameters lists x more than once)",
    ]
    assert parameter_problems("Pair", Pair) == []
    assert parameter_problems("bare", lambda x: x) == ["bare (no Parameters section)"]
