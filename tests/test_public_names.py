"""One name per quantity across the public API (walked with ``inspect`` and ``ast``, so the rule stays).

The curvature is ``k`` and keyword-only (``f(x, *, k=1.0)``); the temperature is ``temperature``
(never ``tau``, never a ``scale`` meaning its inverse); keys are ``keys`` or ``kappa``, never ``kk``;
the curvature is never ``kf``.  Public means: every module of ``hypviz`` whose dotted name has no
part starting with ``_`` (the command, ``hypviz.cli``, parses text: its options and metavars are checked apart),
every name of such a module not starting with ``_`` that the module defines, and for a class its
constructor and the public methods and properties it defines.  A record's generated constructor (a
dataclass or a named tuple: ``Comparison``, ``LayerRecord``, ...) holds ``k`` as a field, in field order,
and is checked for the names only.

Checked, each by its own test: the parameter names; the public names themselves (a function, class,
method, property or record field never has ``tau``, ``kk`` or ``kf`` as a part of its name:
``tau_words``, ``default_tau``); the string keys of the dicts the public modules build (a result's
``setup["tau"]``); and the rendered API text, the docstrings the site's API pages are built from, where
the temperature is :math:`\tau` in a formula and ``temperature`` as a name, never the word ``tau``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from typing import Any, cast

import pytest

import hypviz

#: Parameter names that are never public: the temperature, the keys and the curvature have one name each.
FORBIDDEN = {
    "tau": "the temperature is `temperature`",
    "scale": "a scale is named for what it scales (`temperature`, `edge_length`, `std`, ...)",
    "kk": "the keys are `keys`",
    "kf": "the curvature is `k`",
}

#: Parts of a public name (split at ``_``) that are never used: each quantity has one name.
FORBIDDEN_PARTS = {"tau": "the temperature is `temperature`", "taus": "the temperatures are `temperatures`",
                   "kk": "the keys are `keys`", "kf": "the curvature is `k`"}

#: Dict keys never built by a public module (a result's keys are names too).
FORBIDDEN_KEYS = {**FORBIDDEN_PARTS, "scale": FORBIDDEN["scale"]}

#: Dicts whose keys are not names of quantities, with the reason.
KEYS_ALLOWED = {
    ("hypviz.symbolic.step_report", "tau"): "LaTeX command names mapped to Unicode (\\tau -> τ), not a quantity's name",
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


def name_offences(qual: str, name: str) -> list[str]:
    """What is wrong with the public name ``name`` (a parameter, function, method, property or field)."""
    return [f"{qual}: {name!r} has the part {part!r}: {FORBIDDEN_PARTS[part]}"
            for part in name.lower().split("_") if part in FORBIDDEN_PARTS]


def offences(qual: str, fn: Any) -> list[str]:
    """What is wrong with the parameter names of ``fn`` (empty when nothing is)."""
    found = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in FORBIDDEN:
            found.append(f"{qual}({p.name}): {FORBIDDEN[p.name]}")
        else:
            found += name_offences(f"{qual}({p.name})", p.name)
        positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        if p.name == "k" and positional and qual not in K_IS_THE_SUBJECT and not qual.endswith("(record)"):
            found.append(f"{qual}(k): the curvature is keyword-only (`*, k=...`)")
    return found


def test_the_walk_sees_the_public_api():
    walked = {qual for mod in public_modules() for qual, _ in _callables(importlib.import_module(mod))}
    for name in ("hypviz.lorentz.hyperboloid.lift", "hypviz.attention.comparison.streamed_compare.compare",
                 "hypviz.attention.maps.kernels.Kernel.operands", "hypviz.data.trees.TreeEmbedding (record)",
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


def _names(module: Any) -> Iterator[tuple[str, str]]:
    """``(qualified name, name)`` of every public name ``module`` defines: functions, classes, and a class's public
    methods, properties, class attributes and record fields."""
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        qual = f"{module.__name__}.{name}"
        if inspect.isfunction(obj):
            yield qual, name
        elif inspect.isclass(obj):
            yield qual, name
            fields = list(getattr(obj, "__dataclass_fields__", {})) + list(getattr(obj, "_fields", ()))
            for attr in sorted(set(vars(obj)) | set(fields)):
                if not attr.startswith("_"):
                    yield f"{qual}.{attr}", attr


@pytest.mark.parametrize("module", public_modules())
def test_public_names_have_one_name_per_quantity(module):
    mod = importlib.import_module(module)
    bad = [line for qual, name in _names(mod) for line in name_offences(qual, name)]
    assert not bad, "\n".join(bad)


def key_offences(module: str, source: str) -> list[str]:
    """The dict keys of ``source`` that name a quantity by another name: literal keys, ``dict(name=...)`` and
    ``d["name"] = ...``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        keys: list[Any] = []
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            keys = [kw.arg for kw in node.keywords]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
            keys = [node.slice.value]
        for key in keys:
            if isinstance(key, str) and key in FORBIDDEN_KEYS and (module, key) not in KEYS_ALLOWED:
                line = cast("ast.expr", node).lineno  # a dict display, a dict() call or a subscript
                found.append(f"{module}, line {line}: the key {key!r}: {FORBIDDEN_KEYS[key]}")
    return found


@pytest.mark.parametrize("module", public_modules())
def test_dict_keys_have_one_name_per_quantity(module):
    source = inspect.getsource(importlib.import_module(module))
    bad = key_offences(module, source)
    assert not bad, "\n".join(bad)


_SECTION = re.compile(r"^\s*Examples\n\s*-{3,}\s*$", re.M)  # the Examples section: code and what it prints
_QUOTED = re.compile(r'``"[^`]*"``')  # a quoted string the code writes (a report's words), not a name
_WORD = re.compile(r"(?<![\\\w])(tau|taus|kk|kf)(?!\w)")  # \\tau in a formula is the symbol, rendered as τ


def docstring_offences(qual: str, doc: str | None) -> list[str]:
    """The words of a docstring's rendered text (before its Examples section, quoted strings left out) that name a
    quantity by another name."""
    text = _QUOTED.sub("", _SECTION.split(doc or "", maxsplit=1)[0])
    return [f"{qual}: {line.strip()!r} says {m.group(1)!r}: {FORBIDDEN_PARTS[m.group(1)]}"
            for line in text.splitlines() for m in _WORD.finditer(line)]


def _documented(module: Any) -> Iterator[tuple[str, Any]]:
    yield module.__name__, module
    for qual, name in _names(module):
        owner = module
        for part in qual[len(module.__name__) + 1:].split(".")[:-1]:
            owner = getattr(owner, part)
        obj = getattr(owner, name, None)
        if isinstance(owner, type):
            obj = inspect.getattr_static(owner, name, None)
            obj = getattr(obj, "__func__", getattr(obj, "fget", obj))
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield qual, obj


@pytest.mark.parametrize("module", public_modules())
def test_the_rendered_api_text_has_one_name_per_quantity(module):
    mod = importlib.import_module(module)
    bad = [line for qual, obj in _documented(mod) for line in docstring_offences(qual, inspect.getdoc(obj))]
    assert not bad, "\n".join(bad)


def test_the_name_rules_catch_what_they_are_for():
    assert name_offences("f", "tau_words") and name_offences("C.default_tau", "default_tau")
    assert name_offences("f", "kk_norm") and name_offences("f", "taus")
    assert not name_offences("f", "temperature_words") and not name_offences("f", "norm_scale")
    assert not name_offences("f", "kappa") and not name_offences("f", "task")
    found = key_offences("m", 'setup = {"tau": 1.0, "k": 1.0}\nd = dict(kk=1)\nd["scale"] = 2\nok = {"norm_scale": 1}')
    assert [line.split(": the key ")[1].split(":")[0] for line in found] == ["'tau'", "'kk'", "'scale'"]
    assert docstring_offences("f", "Sliders for the temperature ``tau``.")
    assert docstring_offences("f", "``start = (r, tau)``")
    assert not docstring_offences("f", r"A softmax at :math:`\\tau` = ``temperature``.")
    assert not docstring_offences("f", 'It says ``"at the default tau = 2"``.')
    assert not docstring_offences("f", "Text.\n\nExamples\n--------\n>>> sp.Symbol('tau')\ntau\n")


def test_the_command_line_has_one_name_per_quantity():
    """The options, their metavars and their help (where the temperature is ``T``, as in ``--temperature T``)."""
    from hypviz.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # the sub-commands' parsers (argparse keeps them here)
    bad = []
    for name, sub in commands.items():
        for action in sub._actions:
            for text in [*action.option_strings, action.metavar or "", action.dest or "", action.help or ""]:
                words = re.split(r"[^a-z0-9]+", str(text).lower())  # the help too: the kinds' descriptions, formulas
                bad += [f"hypviz {name} {text}: {FORBIDDEN_PARTS[w]}" for w in words if w in FORBIDDEN_PARTS]
    assert "--temperature" in {o for a in commands["compare"]._actions for o in a.option_strings}
    assert not bad, "\n".join(bad)
