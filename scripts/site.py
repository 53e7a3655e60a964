"""Build the documentation site (Sphinx + MyST-NB + sphinx-book-theme) into build/html.

    python scripts/site.py [--out build/html] [--allow-warnings] [--jobs N] [--notebooks-dir DIR]

The Sphinx source is ``docs/`` (conf.py, the landing page, the API and CLI pages, ``_ext/`` and
``_static/``); the notebooks are read from ``notebooks/`` (``NN_*.ipynb``) and the landing page
quotes README.md.  None of them is copied into git: the build lays out a temporary source folder
(``docs/`` + ``notebooks/NN_*.ipynb`` + README.md as ``_readme.md``) beside the output folder.
The notebooks are *not* executed: their committed outputs are the cache (nbval checks them in
the test command), so the build takes seconds, not minutes.

The site is built twice from the same sources: in English into ``--out``, and in Simplified
Chinese (``-D language=zh_CN``, with the gettext catalogues of ``docs/locale/zh_CN/LC_MESSAGES``,
compiled to ``.mo`` files by Sphinx during the build) into ``--out/zh_CN``; every page links to
its twin in the other language.

Sphinx warnings are errors (``-W --keep-going``: every warning is shown, then the build fails);
``--allow-warnings`` turns that off for local drafts.  The site is written into a temporary folder
and renamed into place only when the build succeeded and the result passed its checks (an
``index.html``, a page per notebook, nothing loaded from the network), so ``--out`` is never
half-written.  A failure ends with one line saying what went wrong, and exit status 1.

The build is incremental as a whole: the finished site holds a stamp of its inputs
(:func:`input_stamp`: a SHA-256 over the path and bytes of every file under ``docs/`` -- the
pages, ``conf.py``, the extensions, the static files, the templates and the translation
catalogues --, the ``NN_*.ipynb`` notebooks, README.md, the ``hypviz/`` sources the API pages are
read from, this script, and the versions of the documentation tools).  When ``--out`` already
holds a site with the same stamp, nothing is rebuilt ("unchanged, kept"); any changed, added or
removed input changes the stamp, so a stale site is never kept.  ``--force`` rebuilds anyway.

A SIGINT, SIGTERM or SIGHUP stops a build at once: its Sphinx processes are killed, its temporary
folder removed, ``--out`` left as it was, and the script exits with ``128 + the signal's number``
(130, 143, 129); a signal that arrives while the finished site is renamed into place is acted on
just after.  One build of a folder runs at a time (a lock on the folder that holds ``--out``), and
each build first removes the temporary folders that killed builds left beside ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
DEFAULT_OUT = ROOT / "build" / "html"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
SECOND_LANGUAGE = "zh_CN"  # built into OUT/zh_CN from docs/locale/zh_CN/LC_MESSAGES/*.po
PACKAGE = ROOT / "hypviz"  # the API pages are autodoc'd from its sources
STAMP_NAME = ".hypviz-inputs"  # in the finished site: the stamp of the inputs it was built from
TOOLS = ("sphinx", "myst-nb", "myst-parser", "sphinx-book-theme", "pydata-sphinx-theme", "sphinx-mathjax-offline",
         "sphinx-copybutton", "plotly", "docutils")  # their versions are inputs too
_SKIPPED_PARTS = {"_build", "__pycache__", ".ipynb_checkpoints"}

# What a page may not load from the network: script sources, module imports, stylesheets and
# other <link>ed resources, CSS imports and url()s, images, frames, media.
_NETWORK_REF = re.compile(
    r"""<script[^>]*\bsrc\s*=\s*["']?(?:https?:)?//|import\s*\(\s*["'](?:https?:)?//|"""
    r"""<link[^>]*\bhref\s*=\s*["']?(?:https?:)?//|@import\s+(?:url\()?\s*["']?(?:https?:)?//|"""
    r"""url\(\s*["']?(?:https?:)?//|<(?:img|iframe|source|video|audio|embed)[^>]*\bsrc\s*=\s*["']?(?:https?:)?//""",
    re.IGNORECASE,
)


class SiteError(RuntimeError):
    """A build problem, reported as one line."""


def network_references(text: str) -> list[str]:
    """Fragments of an HTML/CSS/JS text that would load something from the network."""
    return [text[max(m.start() - 20, 0) : m.end() + 60] for m in _NETWORK_REF.finditer(text)]


def notebook_paths(notebooks_dir: Path = NOTEBOOKS) -> list[Path]:
    found = sorted(Path(notebooks_dir).glob(NOTEBOOK_GLOB))
    if not found:
        raise SiteError(f"no {NOTEBOOK_GLOB} notebooks in {notebooks_dir}")
    return found


def stage_sources(target: Path, docs: Path = DOCS, notebooks_dir: Path = NOTEBOOKS, readme: Path = README) -> list[Path]:
    """Lay out the Sphinx source folder ``target``: docs/, the notebooks, README.md; return the notebooks."""
    if not (docs / "conf.py").is_file():
        raise SiteError(f"{docs} has no conf.py")
    if not readme.is_file():
        raise SiteError(f"{readme} is missing (the landing page quotes it)")
    skip = shutil.ignore_patterns("_build", "__pycache__", ".ipynb_checkpoints")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # a docs/notebooks/ folder is never copied (the notebooks come from notebooks/); the
        # catalogues' locale/<lang>/LC_MESSAGES/notebooks/ are
        top = {"notebooks"} if Path(folder).resolve() == Path(docs).resolve() else set()
        return set(skip(folder, names)) | (top & set(names))

    shutil.copytree(docs, target, ignore=ignore)
    shutil.copyfile(readme, target / "_readme.md")
    (target / "notebooks").mkdir()
    notebooks = notebook_paths(notebooks_dir)
    for nb in notebooks:
        shutil.copyfile(nb, target / "notebooks" / nb.name)
    return notebooks


def _tool_versions() -> list[str]:
    from importlib import metadata

    found = []
    for name in TOOLS:
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}: not installed")
    return found


def input_stamp(
    docs: Path = DOCS,
    notebooks_dir: Path = NOTEBOOKS,
    readme: Path = README,
    package: Path = PACKAGE,
    *,
    options: str = "",
    tools: list[str] | None = None,
) -> str:
    """The SHA-256 (hex) of everything the site is built from.

    .. math::

        \\mathrm{stamp} = \\mathrm{SHA256}\\big(\\Vert_{f} \\;
        (\\mathrm{role}(f),\\ \\mathrm{path}(f),\\ \\mathrm{bytes}(f))\\big)

    over the files ``f`` of ``docs/`` (but ``_build``, ``__pycache__``, checkpoints), the
    ``NN_*.ipynb`` notebooks of ``notebooks_dir``, ``readme``, the ``.py`` files of ``package``
    and this script, in sorted order, each framed by its role, relative path and length (so a
    renamed, added or removed file changes the stamp as an edited one does), followed by
    ``options`` (the build's own settings) and ``tools`` (default: the installed versions of the
    documentation tools, :data:`TOOLS`).
    """
    digest = hashlib.sha256()

    def add(role: str, name: str, data: bytes) -> None:
        for part in (role.encode(), name.encode("utf-8", "surrogateescape"), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)

    docs, notebooks_dir, package = Path(docs), Path(notebooks_dir), Path(package)
    for f in sorted(docs.rglob("*")):
        rel = f.relative_to(docs)
        if f.is_file() and not (_SKIPPED_PARTS & set(rel.parts)):
            add("docs", rel.as_posix(), f.read_bytes())
    for nb in sorted(notebooks_dir.glob(NOTEBOOK_GLOB)):
        add("notebook", nb.name, nb.read_bytes())
    add("readme", "README.md", Path(readme).read_bytes() if Path(readme).is_file() else b"<missing>")
    if package.is_dir():
        for f in sorted(package.rglob("*.py")):
            rel = f.relative_to(package)
            if "__pycache__" not in rel.parts:
                add("package", rel.as_posix(), f.read_bytes())
    add("script", "site.py", Path(__file__).read_bytes())
    add("options", "", options.encode())
    add("tools", "", "\n".join(_tool_versions() if tools is None else tools).encode())
    return digest.hexdigest()


def site_is_current(out: Path, stamp: str) -> bool:
    """``out`` holds a finished site (both languages) built from inputs with this ``stamp``."""
    out = Path(out)
    try:
        kept = (out / STAMP_NAME).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return kept == stamp and (out / "index.html").is_file() and (out / SECOND_LANGUAGE / "index.html").is_file()


def is_current(
    out: Path = DEFAULT_OUT,
    *,
    warnings_as_errors: bool = True,
    docs: Path = DOCS,
    notebooks_dir: Path = NOTEBOOKS,
    readme: Path = README,
) -> bool:
    """``out`` holds a finished site that :func:`build` made, with these settings, from the inputs as they are now.

    True when the stamp kept in ``out`` equals :func:`input_stamp` of the current inputs with the
    build's options (:func:`site_is_current`): the same test that lets ``build(force=False)`` keep a
    site.  The test command uses it to read the main job's ``build/html`` instead of building again.
    """
    stamp = input_stamp(docs, notebooks_dir, readme, options=_options(warnings_as_errors))
    return site_is_current(out, stamp)


def _options(warnings_as_errors: bool) -> str:
    """The build's own settings, as they enter the stamp."""
    return f"warnings_as_errors={warnings_as_errors}"


def check_site(out: Path, notebooks: list[Path]) -> None:
    """The finished site has its pages and loads nothing from the network (raises SiteError)."""
    if not (out / "index.html").is_file():
        raise SiteError("Sphinx wrote no index.html")
    missing = [nb.stem for nb in notebooks if not (out / "notebooks" / f"{nb.stem}.html").is_file()]
    if missing:
        raise SiteError(f"no page for the notebooks {', '.join(missing)}")
    for page in sorted(out.rglob("*.html")):
        if "_static" in page.relative_to(out).parts:
            continue
        bad = network_references(page.read_text(encoding="utf-8", errors="replace"))
        if bad:
            raise SiteError(f"{page.relative_to(out)} would load from the network: {bad[0]!r}")
    for sheet in sorted((out / "_static").rglob("*.css")):
        bad = network_references(sheet.read_text(encoding="utf-8", errors="replace"))
        if bad:
            raise SiteError(f"{sheet.relative_to(out)} would load from the network: {bad[0]!r}")


class _Running:
    """The build under way in this process, for the signal handler (:func:`_on_signal`)."""

    pid: int | None = None  # the process that installed the handler (a forked Sphinx worker is not it)
    work: list[Path] = []  # the temporary folders of builds under way
    out: Path | None = None
    renaming = False  # inside the renames that put the new site in place
    pending: int | None = None  # a signal that arrived while renaming
    replaced = False  # the new site is in place


def _on_signal(signum: int, frame: object) -> None:
    """Stop the build at once on SIGINT, SIGTERM or SIGHUP (installed by :func:`main`); see :func:`_stop`."""
    if os.getpid() != _Running.pid:  # a forked Sphinx worker: the build's own process cleans up
        os._exit(128 + signum)
    if _Running.renaming:
        _Running.pending = signum
        return
    _stop(signum)


def _stop(signum: int) -> None:
    """Kill the build's Sphinx processes, remove its temporary folders, say so in one line, exit ``128 + signum``.

    ``os._exit``: no ``finally`` block, exit handler or interpreter teardown of the interrupted build runs.
    """
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    import multiprocessing

    for child in multiprocessing.active_children():  # Sphinx's -j workers
        child.kill()
    for work in _Running.work:
        shutil.rmtree(work, ignore_errors=True)
    name = signal.Signals(signum).name
    out = _show(_Running.out) if _Running.out is not None else "the site"
    kept = "the new site was already in place" if _Running.replaced else f"{out} was left as it was"
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # RuntimeError: a write the signal interrupted
        sys.stdout.flush()
        print(f"site.py: stopped by {name}; {kept}, the temporary folder removed", file=sys.stderr, flush=True)
    os._exit(128 + signum)


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _renaming():
    """A step a signal must not cut in two: a signal that arrives inside it stops the build once it is done."""
    _Running.renaming = True
    try:
        yield
    finally:
        _Running.renaming = False
        if _Running.pending is not None:
            _stop(_Running.pending)


@contextlib.contextmanager
def _one_build(out: Path, log=print):
    """Hold the lock of ``out``'s folder (``flock`` on it, waiting for another build there to end; released by the
    kernel however this process ends), then remove what killed builds of ``out`` left beside it: the temporary
    folders ``.NAME.tmp-*`` and, when ``out`` exists, the previous sites ``.NAME.old-*``."""
    try:
        import fcntl
    except ImportError:  # no locks: nothing can tell a killed build's folder from a running one's
        yield
        return
    fd = os.open(out.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"site: waiting for another build in {_show(out.parent)} to end")
            fcntl.flock(fd, fcntl.LOCK_EX)
        stale = [p for p in out.parent.glob(f".{out.name}.tmp-*") if p.is_dir() and not p.is_symlink()]
        if out.is_dir():
            stale += [p for p in out.parent.glob(f".{out.name}.old-*") if p.is_dir() and not p.is_symlink()]
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        if stale:
            log(f"site: removed {len(stale)} temporary folder(s) that interrupted builds left beside {_show(out)}")
        yield
    finally:
        os.close(fd)


def _replace_dir(new: Path, out: Path) -> None:
    """Put ``new`` at ``out`` in one rename (the old folder, if any, is moved aside first, then removed)."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(new, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build(
    out: Path = DEFAULT_OUT,
    *,
    warnings_as_errors: bool = True,
    jobs: str = "1",
    docs: Path = DOCS,
    notebooks_dir: Path = NOTEBOOKS,
    readme: Path = README,
    quiet: bool = True,
    warnings_file: Path | None = None,
    log=print,
    force: bool = True,
) -> Path:
    """Build the site into ``out`` (replaced as a whole, only on success); return ``out / 'index.html'``.

    ``warnings_file``: Sphinx also writes its warnings there (empty when the build is clean).
    ``force=False``: keep ``out`` as it is when it was built from the same inputs
    (:func:`input_stamp`, :func:`site_is_current`).  A build first waits for one under way in ``out``'s
    folder, then removes the temporary folders that killed builds of ``out`` left there (:func:`_one_build`).
    """
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with _one_build(out, log):
        return _build(out, warnings_as_errors=warnings_as_errors, jobs=jobs, docs=docs, notebooks_dir=notebooks_dir,
                      readme=readme, quiet=quiet, warnings_file=warnings_file, log=log, force=force)


def _build(out: Path, *, warnings_as_errors: bool, jobs: str, docs: Path, notebooks_dir: Path, readme: Path,
           quiet: bool, warnings_file: Path | None, log, force: bool) -> Path:
    """:func:`build` once it holds the lock of ``out``'s folder."""
    stamp = input_stamp(docs, notebooks_dir, readme, options=_options(warnings_as_errors))
    if not force and site_is_current(out, stamp):
        log(f"site: unchanged, kept {_show(out / 'index.html')} (its inputs match the stamp {stamp[:12]}; --force rebuilds)")
        return out / "index.html"
    try:
        from sphinx.cmd.build import build_main
    except ImportError as exc:
        raise SiteError(
            f"Sphinx is not installed in this environment ({exc}): install the docs extra, "
            "e.g. bash scripts/setup.sh lab (hypviz[lab] includes hypviz[docs])"
        ) from None
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    _Running.work.append(work)
    _Running.out, _Running.replaced = out, False
    try:
        src, html, doctrees = work / "src", work / "html", work / "doctrees"
        notebooks = stage_sources(src, docs, notebooks_dir, readme)
        args = ["-b", "html", "-j", str(jobs)]
        if warnings_as_errors:
            args += ["-W", "--keep-going"]
        if quiet:
            args += ["-q"]
        if warnings_file is not None:
            args += ["-w", str(warnings_file)]
        start = time.perf_counter()
        for language, target, trees in ((None, html, doctrees), (SECOND_LANGUAGE, html / SECOND_LANGUAGE, work / "doctrees-zh")):
            run = [*args, "-d", str(trees)] + (["-D", f"language={language}"] if language else [])
            if warnings_file is not None and language:
                run[run.index("-w") + 1] = str(Path(warnings_file).with_name(f"{Path(warnings_file).stem}-{language}.txt"))
            with warnings.catch_warnings():
                # the extensions' use of APIs that a later Sphinx removes: not a problem of this site
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", PendingDeprecationWarning)
                status = build_main([*run, str(src), str(target)])
            if status != 0:
                if status == 1 and warnings_as_errors:
                    what = "Sphinx reported warnings (errors here: -W --keep-going), listed above"
                else:
                    what = f"Sphinx stopped with an error (exit status {status}), shown above"
                in_language = f" (the {language} build)" if language else ""
                raise SiteError(f"{what}{in_language}; {_show(out)} was left as it was")
        check_site(html, notebooks)
        check_site(html / SECOND_LANGUAGE, notebooks)
        for sources in (html / SECOND_LANGUAGE / "_sources",):
            if sources.is_dir() and not any(sources.iterdir()):
                sources.rmdir()
        sources = html / "_sources"  # html_copy_source = False leaves it empty
        if sources.is_dir() and not any(sources.iterdir()):
            sources.rmdir()
        (html / STAMP_NAME).write_text(stamp + "\n", encoding="utf-8")
        os.chmod(html, 0o755)
        with _renaming():
            _replace_dir(html, out)
            _Running.replaced = True
        log(f"site: {len(notebooks)} notebooks, API and CLI pages, in English and {SECOND_LANGUAGE} -> "
            f"{_show(out / 'index.html')} "
            f"in {time.perf_counter() - start:.1f} s")
        return out / "index.html"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _Running.work.remove(work)


def _show(path: Path) -> str:
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder, replaced as a whole (default build/html)")
    parser.add_argument("--allow-warnings", action="store_true", help="do not treat Sphinx warnings as errors")
    parser.add_argument("--jobs", "-j", default="1", help="Sphinx's parallel jobs (default 1; 'auto' = one per core)")
    parser.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS,
                        help=f"where the {NOTEBOOK_GLOB} are (default notebooks/)")
    parser.add_argument("--verbose", action="store_true", help="show Sphinx's progress, not only its warnings")
    parser.add_argument("--force", action="store_true", help="rebuild even when the inputs match the existing site's stamp")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    _Running.pid = os.getpid()
    before = {s: signal.signal(s, _on_signal) for s in _SIGNALS}
    try:
        build(
            args.out,
            warnings_as_errors=not args.allow_warnings,
            jobs=args.jobs,
            notebooks_dir=args.notebooks_dir,
            quiet=not args.verbose,
            force=args.force,
        )
    except SiteError as exc:
        print(f"site.py: {exc}", file=sys.stderr)
        return 1
    finally:
        for s, handler in before.items():
            if handler is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(s, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
