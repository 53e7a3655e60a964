"""pyproject.toml, environment.yml and constraints.txt (the one pin list) agree with each other.

environment.yml is read with plain line parsing (PyYAML is not a dependency of hypviz).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomllib (3.11+) or tomli")

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalise(name: str) -> str:
    """PEP 503 spelling: lowercase, runs of '-', '_' and '.' become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    m = NAME.match(req)
    assert m, f"cannot read a package name from {req!r}"
    return normalise(m.group(1))


def pyproject_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    names = {requirement_name(r) for r in reqs}
    names.discard("hypviz")  # an extra may point back at the project itself
    return names


def environment_pip_lines() -> list[str]:
    """The entries of the ``- pip:`` list in environment.yml, comments stripped."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    entries: list[str] = []
    pip_indent = None
    for line in lines:
        text = line.split("#", 1)[0].rstrip()
        if not text.strip():
            continue
        indent = len(text) - len(text.lstrip())
        if pip_indent is None:
            if re.fullmatch(r"\s*-\s*pip\s*:", text):
                pip_indent = indent
            continue
        if indent <= pip_indent:
            break  # the pip list has ended
        m = re.fullmatch(r"\s*-\s+(.+)", text)
        assert m, f"environment.yml: unexpected line in the pip list: {line!r}"
        entries.append(m.group(1).strip().strip("\"'"))
    assert entries, "environment.yml has no '- pip:' list"
    return entries


def environment_packages() -> set[str]:
    return {requirement_name(e) for e in environment_pip_lines() if not e.startswith("-")}


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!-]+)", text)
        assert m, f"constraints.txt: expected 'name==version', got {line!r}"
        name = normalise(m.group(1))
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = m.group(2)
    return pins


def test_parsers_read_something():
    # a parser that silently reads nothing would make the agreement tests vacuous
    assert {"numpy", "torch", "sympy", "pytest"} <= pyproject_packages()
    assert {"numpy", "torch", "sympy", "pytest"} <= environment_packages()
    assert {"numpy", "torch", "sympy"} <= set(constraints())
    assert normalise("Typing_Extensions") == normalise("typing.extensions") == "typing-extensions"


def test_environment_and_pyproject_name_the_same_packages():
    py, env = pyproject_packages(), environment_packages()
    assert py == env, (
        f"only in pyproject.toml: {sorted(py - env)}; only in environment.yml: {sorted(env - py)}"
    )


def test_every_pyproject_package_is_pinned_exactly():
    pins = constraints()
    missing = sorted(pyproject_packages() - set(pins))
    assert not missing, f"packages named in pyproject.toml without an '==' pin in constraints.txt: {missing}"


def test_environment_yml_uses_the_pin_list():
    options = [e for e in environment_pip_lines() if e.startswith("-")]
    uses = [o for o in options if re.fullmatch(r"(-c|--constraint)(\s+|=)constraints\.txt", o)]
    assert uses, f"environment.yml's pip list does not reference constraints.txt (options: {options})"
    assert (ROOT / "constraints.txt").is_file()


@pytest.mark.parametrize("package", ["numpy", "sympy", "matplotlib", "plotly", "torch"])
def test_installed_versions_match_the_pins(package):
    pinned = constraints().get(package)
    assert pinned is not None, f"{package} is not pinned in constraints.txt"
    try:
        installed = metadata.version(package)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{package} is not installed in this environment")
    # a local version label (torch's '+cpu') names the build, not the release
    assert installed.split("+", 1)[0] == pinned.split("+", 1)[0], (
        f"{package} {installed} is installed but constraints.txt pins {pinned}; "
        f"re-run the set-up (bash scripts/setup.sh test)"
    )


# --------------------------------------------------------------------------- #
# the main job installs what the notebooks import
# --------------------------------------------------------------------------- #
# import name -> the distribution that provides it (where the two differ)
_PROVIDERS = {"IPython": "ipython", "matplotlib_inline": "ipykernel", "yaml": "pyyaml", "PIL": "pillow"}
# distributions that arrive with another one the extra names (ipykernel brings IPython)
_BROUGHT_BY = {"ipython": "ipykernel", "pillow": "matplotlib"}


def extra_closure(extra: str) -> set[str]:
    """The packages installed by ``pip install .[extra]``: dependencies, the extra, extras it names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    names = {requirement_name(r) for r in project.get("dependencies", [])}
    todo, seen = [extra], set()
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for req in extras[e]:
            m = re.fullmatch(r"\s*hypviz\[([^\]]+)\]\s*", req)
            if m:
                todo += [x.strip() for x in m.group(1).split(",")]
            else:
                names.add(requirement_name(req))
    return names


def notebook_imports() -> set[str]:
    import json

    found = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", line)
                if m:
                    found.add(m.group(1))
    return found


def test_parsers_of_notebook_imports_read_something():
    assert {"numpy", "torch", "sympy", "hypviz"} <= notebook_imports()
    assert "geoopt" in extra_closure("notebooks") and "pytest" in extra_closure("test")


@pytest.mark.parametrize("extra", ["lab", "test"])
def test_the_extra_installs_every_package_the_notebooks_import(extra):
    """``run.sh`` installs ``lab`` and executes every notebook; ``test.sh`` installs ``test`` and runs nbval."""
    import sys

    installed = extra_closure(extra)
    missing = []
    for module in sorted(notebook_imports()):
        if module == "hypviz" or module in sys.stdlib_module_names:
            continue
        dist = normalise(_PROVIDERS.get(module, module))
        if dist not in installed and _BROUGHT_BY.get(dist) not in installed:
            missing.append(f"{module} (package {dist})")
    assert not missing, f"the notebooks import {missing}, which pip install .[{extra}] does not install"


# --------------------------------------------------------------------------- #
# the main job builds the site: its extra installs what docs/conf.py loads
# --------------------------------------------------------------------------- #
# Sphinx extension / theme module -> the distribution that provides it
_SPHINX_PROVIDERS = {
    "myst_nb": "myst-nb",
    "sphinx_copybutton": "sphinx-copybutton",
    "sphinx-mathjax-offline": "sphinx-mathjax-offline",
    "sphinx_book_theme": "sphinx-book-theme",
}


def site_modules() -> tuple[list[str], str]:
    """``extensions`` and ``html_theme`` of docs/conf.py, read without running it."""
    import ast

    tree = ast.parse((ROOT / "docs" / "conf.py").read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("extensions", "html_theme"):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    assert "extensions" in values and "html_theme" in values, "docs/conf.py sets no extensions / html_theme"
    return values["extensions"], values["html_theme"]


@pytest.mark.parametrize("extra", ["lab", "test"])
def test_the_extra_installs_what_the_site_build_loads(extra):
    """``run.sh`` builds the site with the ``lab`` extra; ``test.sh`` tests it with ``test``."""
    installed = extra_closure(extra)
    extensions, theme = site_modules()
    missing = []
    for module in [*extensions, theme]:
        if module.startswith("sphinx.ext."):
            dist = "sphinx"
        elif (ROOT / "docs" / "_ext" / f"{module}.py").is_file():
            continue  # the site's own extensions, in docs/_ext
        else:
            dist = _SPHINX_PROVIDERS.get(module)
            assert dist, f"docs/conf.py loads {module}: add the package that provides it to _SPHINX_PROVIDERS"
        if normalise(dist) not in installed:
            missing.append(f"{module} (package {dist})")
    assert not missing, f"docs/conf.py loads {missing}, which pip install .[{extra}] does not install"
