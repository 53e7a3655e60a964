r"""Extensions from other packages: the entry points ``hypviz.kinds``, ``hypviz.kernels``, ``hypviz.readers``, and
modules named on the command line (``hypviz --plugin MODULE``).  Standard library only (no torch).

A plugin is a module whose import registers what it provides: kinds (:func:`hypviz.base.kinds.register`), kernels
(:func:`hypviz.attention.register_kernel`), capture readers (:func:`hypviz.capture.register`).  A distribution
declares it in one of the groups :data:`GROUPS`, naming the module (``my_pkg.readers``) or an object in it
(``my_pkg.readers:MyReader``, loaded to check it exists; its module's import is what registers it)::

    # pyproject.toml of the distribution my_pkg
    [project.entry-points."hypviz.readers"]
    my_family = "my_pkg.readers"

When they load:

* the ``hypviz`` command loads every entry point of :data:`GROUPS` once at its start, then each ``--plugin MODULE``
  (:func:`load_module`), before it parses its options (so ``--kinds`` and ``--help`` know a plugin's kinds);
* in Python, lazily: the first time a lookup by name misses (:func:`hypviz.base.kinds.get` and
  :func:`~hypviz.base.kinds.check` of a kind not registered, a capture record whose ``mode`` or ``kind`` is not
  registered) and when :func:`hypviz.capture.attention` looks for readers; or explicitly, :func:`load_entry_points`.

Loading is idempotent: an entry point is imported once per process (a second call returns at once), and a module
given twice is imported once.  A plugin that fails to load raises :class:`PluginError`, one line naming the plugin,
where it was named and what failed; a failed entry point is not imported again, but every later
:func:`load_entry_points` raises its error again (a lookup never silently does without an installed plugin).

Examples
--------
>>> from hypviz.base import plugins
>>> plugins.load_module("json").__name__     # any importable module but hypviz's own; imported once
'json'
>>> plugins.load_module("no_such_module_for_hypviz")
Traceback (most recent call last):
    ...
hypviz.base.plugins.PluginError: plugin 'no_such_module_for_hypviz' (--plugin) failed to load:
    ModuleNotFoundError: No module named 'no_such_module_for_hypviz'
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any, TypeGuard, cast

__all__ = ["GROUPS", "PluginError", "load_entry_points", "load_module", "loading", "loaded", "is_module_name"]

#: The entry-point groups hypviz reads: kinds, kernels, capture readers.
GROUPS: tuple[str, ...] = ("hypviz.kinds", "hypviz.kernels", "hypviz.readers")

NAME_MAX = 256  # characters of a module name


class PluginError(ImportError):
    """A plugin (an entry point or a ``--plugin`` module) that failed to load; its message is one line."""


_LOCK = threading.RLock()
_DONE = False  # the entry points were read (once a process)
_FAILED: list[str] = []  # the messages of the entry points that failed, raised again by every load_entry_points
_LOADED: dict[str, str] = {}  # module -> where it was named ("--plugin", "entry point 'x' in group hypviz.readers")
_NOW: list[str] = []  # the plugin modules being imported now (innermost last)


def is_module_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a dotted Python module name (``my_pkg.readers``), at most 256 characters.

    >>> is_module_name("my_pkg.readers"), is_module_name("my_pkg/readers.py"), is_module_name("")
    (True, False, False)
    """
    return isinstance(name, str) and 0 < len(name) <= NAME_MAX and all(p.isidentifier() for p in name.split("."))


def loading() -> str | None:
    """The plugin module being imported now (None outside a plugin's import): what a registry records as the
    provider of an entry registered meanwhile."""
    return _NOW[-1] if _NOW else None


def loaded() -> dict[str, str]:
    """The plugin modules loaded so far in this process, each with where it was named."""
    return dict(_LOADED)


def _failure(plugin: str, source: str, exc: BaseException) -> PluginError:
    text = " ".join(str(exc).split()) or "no detail"
    hint = ""
    top = plugin.split(":")[0].split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and exc.name == top and (os.path.isfile(f"{top}.py") or os.path.isdir(top)):
        hint = f" ({top} is in the current folder, which is not on the module path: set PYTHONPATH=.)"
    return PluginError(f"plugin {plugin!r} ({source}) failed to load: {type(exc).__name__}: {text[:500]}{hint}")


def _import(module: str, source: str, target: str | None = None) -> Any:
    """Import ``module`` (and get ``target`` from it) as a plugin named in ``source``; one-line :class:`PluginError`.

    Loaded as an entry point is (:meth:`importlib.metadata.EntryPoint.load`); never a module of hypviz itself (its
    modules import each other by name, layer by layer)."""
    from importlib.metadata import EntryPoint

    plugin = module if target is None else f"{module}:{target}"
    if module == "hypviz" or module.startswith("hypviz."):
        raise PluginError(f"plugin {plugin!r} ({source}) is a module of hypviz itself, not a plugin: expected a module "
                          "of another package (hypviz's own load by themselves)")
    _NOW.append(module)
    try:
        obj = EntryPoint(name=module, value=plugin, group=source).load()
    except Exception as exc:  # whatever a plugin's import raises (ImportError, SyntaxError, a registry's ValueError)
        raise _failure(plugin, source, exc) from None
    finally:
        _NOW.pop()
    _LOADED.setdefault(module, source)
    return obj


def load_module(name: str, source: str = "--plugin") -> ModuleType:
    """Import the plugin module ``name`` once (its import registers what it provides); returns the module.

    ``source`` says where it was named, for the message.  A name that is no dotted module name, or a module whose
    import fails, raises :class:`PluginError`: ``plugin 'x' (--plugin) failed to load: ModuleNotFoundError: ...``.
    """
    with _LOCK:
        if not is_module_name(name):
            raise PluginError(f"plugin {_shown(name)} ({source}) is not a module name: expected a dotted Python module "
                              "name such as my_pkg.readers (importable: installed, or on PYTHONPATH)")
        return cast(ModuleType, _import(name, source))  # a module name without ":object" loads the module


def _shown(name: object) -> str:
    """``name`` as a message shows it: its repr, cut after 80 characters."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def load_entry_points() -> tuple[str, ...]:
    """Load every entry point of :data:`GROUPS` once in this process; returns the modules they named (in order).

    A second call returns the same at once; a call made while a plugin is being imported (a plugin whose import
    looks a kind up) returns at once too.  An entry point that failed raises its one-line :class:`PluginError`, at
    this call and every later one (``plugin 'my_pkg.readers' (entry point 'my_family' in group hypviz.readers of
    my_pkg 0.1) failed to load: ModuleNotFoundError: No module named 'torchx'``): the other entry points are loaded
    first.
    """
    global _DONE
    with _LOCK:
        if not _DONE and not _NOW:
            _DONE = True
            from importlib.metadata import entry_points

            for group in GROUPS:
                for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
                    dist = getattr(ep, "dist", None)
                    of = f" of {dist.name} {dist.version}" if dist is not None else ""
                    source = f"entry point {ep.name!r} in group {group}{of}"
                    module, _, attribute = ep.value.partition(":")
                    module, target = module.strip(), attribute.strip() or None
                    try:
                        if not is_module_name(module) or (target is not None and not is_module_name(target)):
                            raise PluginError(f"plugin {ep.value!r} ({source}) is not a module or module:object name")
                        _import(module, source, target)
                    except PluginError as exc:
                        _FAILED.append(str(exc))
        if _FAILED:
            raise PluginError(_FAILED[0] + (f" (and {len(_FAILED) - 1} more)" if len(_FAILED) > 1 else ""))
        return tuple(m for m, where in _LOADED.items() if where.startswith("entry point"))
