"""One name per quantity across the public API (walked with ``inspect``, so the rule stays).

The curvature is ``k`` and keyword-only (``f(x, *, k=1.0)``); the temperature is ``temperature``
(never ``tau``, never a ``scale`` meaning its inverse); keys are ``keys`` or ``kappa``, never ``kk``;
the curvature is never ``kf``.  Public means: every module of ``hypviz`` whose dotted name has no
part starting with ``_`` (the command, ``hypviz.cli``, parses text and is checked by its own tests),
every name of such a module not starting with ``_`` that the module defines, and for a class its
constructor and the public methods it defines.  A record's generated constructor (a dataclass or a
named tuple: ``Comparison``, ``LayerRecord``, ...) holds ``k`` as a field, in field order, and is
checked for the names only.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest

import hypviz

#: Parameter names that are never public: the temperature, the keys and the curvature have one name each.
FORBIDDEN = {
    "tau": "the temperature is `temperature`",
    "scale": "a scale is named for what it scales (`temperature`, `edge_length`, `std`, ...)",
    "kk": "the keys are `keys`",
    "kf": "the curvature is `k`",
}

#: Functions whose subject is ``k`` itself (the value they check), so it stays their first positional argument.
K_IS_THE_SUBJECT = {"hypviz.lorentz.points.check_k", "hypviz.symbolic.geometry.curvature"}


def public_modules() -> list[str]:
    names = [hypviz.__name__]
    for info in pkgutil.walk_packages(hypviz.__path__, prefix="hypviz."):
        parts = info.name.split(".")
        if parts[1] == "cli" or any(p.startswith("_") for p in parts):
            continue
        names.append(info.name)
    return sorted(names)


def _callables(module: Any) -> Iterator[tuple[str, Any]]:
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        qual = f"{module.__name__}.{name}"
        if inspect.isclass(obj):
            init = vars(obj).get("__init__")
            if "__dataclass_fields__" in vars(obj) or hasattr(obj, "_fields"):  # generated constructors
                yield f"{qual} (record)", obj
            elif init is not None and inspect.isfunction(init):
                yield qual, init
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    yield f"{qual}.{attr}", member
        elif inspect.isfunction(obj):
            yield qual, obj


def offences(qual: str, fn: Any) -> list[str]:
    """What is wrong with the parameter names of ``fn`` (empty when nothing is)."""
    found = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in FORBIDDEN:
            found.append(f"{qual}({p.name}): {FORBIDDEN[p.name]}")
        positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        if p.name == "k" and positional and qual not in K_IS_THE_SUBJECT and not qual.endswith("(record)"):
            found.append(f"{qual}(k): the curvature is keyword-only (`*, k=...`)")
    return found


def test_the_walk_sees_the_public_api():
    walked = {qual for mod in public_modules() for qual, _ in _callables(importlib.import_module(mod))}
    for name in ("hypviz.lorentz.hyperboloid.lift", "hypviz.attention.streamed_compare.compare",
                 "hypviz.attention.kernels.Kernel.operands", "hypviz.data.trees.TreeEmbedding (record)",
                 "hypviz.toymodel.HypAttention", "hypviz.plots.scenes.disk_scene", "hypviz.symbolic.geometry.lifted_norm"):
        assert name in walked
    assert not any(q.startswith("hypviz.cli") or "._" in q for q in walked)


@pytest.mark.parametrize("module", public_modules())
def test_one_name_per_quantity(module):
    mod = importlib.import_module(module)
    bad = [line for qual, fn in _callables(mod) for line in offences(qual, fn)]
    assert not bad, "\n".join(bad)


def test_the_rule_catches_each_name():
    def positional_k(x, k=1.0): ...
    def old_temperature(x, *, tau=1.0): ...
    def inverse_temperature(x, *, scale=1.0): ...
    def short_keys(q, kk): ...
    def short_curvature(q, *, kf=1.0): ...
    def fine(queries, keys, *, k=1.0, temperature=1.0): ...

    for fn in (positional_k, old_temperature, inverse_temperature, short_keys, short_curvature):
        assert offences(fn.__name__, fn), fn.__name__
    assert offences("fine", fine) == []
    assert offences("hypviz.lorentz.points.check_k", positional_k) == []
