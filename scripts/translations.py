"""The site's translatable messages and how many of them the Simplified Chinese catalogues translate.

    python scripts/translations.py [--pot DIR] [--update]

Extracts every translatable message of the site (headings, paragraphs, list items, captions,
figure alt text, table cells, the sidebar's titles) with Sphinx's gettext builder, over the same
temporary source folder that ``scripts/site.py`` lays out (docs/ + notebooks/NN_*.ipynb +
README.md), and prints, per page, how many messages its catalogue
``docs/locale/zh_CN/LC_MESSAGES/<page>.po`` translates.

``--pot DIR`` keeps the extracted templates (``<page>.pot``) in DIR; ``--update`` adds the
messages a catalogue lacks to it as empty entries (``msgstr ""``) and drops the entries whose
English text no page has any more (their translation is stale), so that a translator edits only
the ``.po`` files.  ``tests/test_translation.py`` requires every message of a translated page to
have a non-empty, non-fuzzy translation.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# scripts/site.py, loaded by path (``import site`` would find the standard library's module)
_spec = importlib.util.spec_from_file_location("hypviz_site_script", Path(__file__).resolve().parent / "site.py")
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)
ROOT = site.ROOT
CATALOGUES = site.DOCS / "locale" / site.SECOND_LANGUAGE / "LC_MESSAGES"


def extract(pot_dir: Path) -> dict[str, Path]:
    """Run Sphinx's gettext builder over the staged site sources; return {page: its .pot file}.

    A page is named by its document name, e.g. ``index`` or ``notebooks/01_lorentzian_inner_product``.
    """
    pot_dir = Path(pot_dir)
    pot_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hypviz-gettext-"))
    try:
        src = work / "src"
        site.stage_sources(src)
        # in a process of its own: a Sphinx build run earlier in this process (the Chinese site, by
        # the site tests) leaves its translators installed, and the extracted messages would differ
        command = [sys.executable, "-W", "ignore::DeprecationWarning", "-W", "ignore::PendingDeprecationWarning",
                   "-m", "sphinx", "-b", "gettext", "-q", "-D", "suppress_warnings=mystnb.mime_priority",
                   "-d", str(work / "doctrees"), str(src), str(pot_dir)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the gettext build failed (exit status {done.returncode}): "
                               f"{(done.stderr.strip().splitlines() or [''])[-1]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {str(p.relative_to(pot_dir).with_suffix("")): p for p in sorted(pot_dir.rglob("*.pot"))}


def read_catalogue(path: Path):
    """The babel Catalog of a .po or .pot file."""
    from babel.messages.pofile import read_po

    with open(path, "rb") as handle:
        return read_po(handle)


def coverage(page: str, pot: Path) -> tuple[int, list[str]]:
    """(number of messages of ``page``, the English messages its catalogue does not translate).

    A message counts as translated when the catalogue has it with a non-empty msgstr that is not
    marked fuzzy.
    """
    template = read_catalogue(pot)
    po = CATALOGUES / f"{page}.po"
    catalogue = read_catalogue(po) if po.is_file() else None
    wanted = [m.id for m in template if m.id]
    missing = []
    for msgid in wanted:
        entry = catalogue.get(msgid) if catalogue is not None else None
        if entry is None or not entry.string or entry.fuzzy:
            missing.append(msgid)
    return len(wanted), missing


def update(page: str, pot: Path) -> None:
    """Add the page's missing messages to its catalogue (empty msgstr); drop entries no page has."""
    from babel.messages.pofile import write_po

    from babel.messages.catalog import Catalog

    template = read_catalogue(pot)
    po = CATALOGUES / f"{page}.po"
    if po.is_file():
        catalogue = read_catalogue(po)
    else:
        catalogue = Catalog(locale=site.SECOND_LANGUAGE, project="hypviz", fuzzy=False)
        catalogue.header_comment = (
            f"# Simplified Chinese translation of the page {page} of the hypviz site.\n"
            "# msgid: the English message as the page has it (python scripts/translations.py --update adds new ones)."
        )
    created = catalogue.creation_date if po.is_file() else template.creation_date
    catalogue.update(template, no_fuzzy_matching=True)
    catalogue.creation_date = created  # no churn in a catalogue whose messages did not change
    catalogue.obsolete.clear()
    po.parent.mkdir(parents=True, exist_ok=True)
    with open(po, "wb") as handle:
        write_po(handle, catalogue, width=0, omit_header=False, include_previous=False, sort_output=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pot", type=Path, default=None, help="keep the extracted .pot files in this folder")
    parser.add_argument("--update", action="store_true", help="add missing messages to the .po files (empty msgstr)")
    args = parser.parse_args(argv)
    keep = args.pot is not None
    pot_dir = args.pot if keep else Path(tempfile.mkdtemp(prefix="hypviz-pot-"))
    try:
        for page, pot in extract(pot_dir).items():
            if args.update:
                update(page, pot)
            total, missing = coverage(page, pot)
            print(f"{page}: {total - len(missing)}/{total} translated")
    finally:
        if not keep:
            shutil.rmtree(pot_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
