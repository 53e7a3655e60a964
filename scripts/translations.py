"""The site's translatable messages and how many of them the Simplified Chinese catalogues translate.

    python scripts/translations.py [--pot DIR] [--update]

Extracts every translatable message of the site (headings, paragraphs, list items, captions,
figure alt text, table cells, the sidebar's titles) with Sphinx's gettext builder, over the same
temporary source folder that ``scripts/site.py`` lays out (docs/ + notebooks/NN_*.ipynb +
README.md), and prints, per page, how many messages its catalogue
``docs/locale/zh_CN/LC_MESSAGES/<page>.po`` translates.

``--pot DIR`` keeps the extracted templates (``<page>.pot``) in DIR; ``--update`` adds the
messages a catalogue lacks to it and drops the entries whose English text no page has any more,
so that a translator edits only the ``.po`` files.  A new message that is a changed old one (the
same paragraph with a number or a few words changed: ``difflib``'s similarity ratio of the two
English texts at least :data:`SIMILAR`, each old entry used once, the closest pairs first) keeps
the old translation, marked ``#, fuzzy`` with the old English as its previous msgid (``#| msgid``);
any other new message gets an empty ``msgstr``.  The translator checks a fuzzy entry against the
new English, edits it, and removes its ``#, fuzzy`` and ``#|`` lines.  ``tests/test_translation.py``
requires every message of a translated page to have a non-empty, non-fuzzy translation, and lists
each fuzzy entry as needing review.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# scripts/site.py, loaded by path (``import site`` would find the standard library's module)
_spec = importlib.util.spec_from_file_location("hypviz_site_script", Path(__file__).resolve().parent / "site.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)
ROOT = site.ROOT
CATALOGUES = site.DOCS / "locale" / site.SECOND_LANGUAGE / "LC_MESSAGES"
SIMILAR = 0.8  # the similarity ratio from which a new message is taken for a changed old one (kept as fuzzy)


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
    """The babel Catalog of a .po or .pot file, each entry's previous msgid (its ``#|`` lines, which babel reads as
    comments) as its ``previous_id``."""
    from babel.messages.pofile import denormalize, read_po

    with open(path, "rb") as handle:
        catalogue = read_po(handle)
    for message in catalogue:
        previous = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
        if previous:
            message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
            message.previous_id = [denormalize("\n".join(previous).removeprefix("msgid ").strip())]
    return catalogue


def write_catalogue(catalogue, po: Path) -> None:
    """Write ``catalogue`` to ``po``: msgids unwrapped, in the template's order, each previous msgid as ``#|`` lines
    above its msgid (unwrapped too: babel's own wraps them into lines it cannot read back)."""
    from babel.messages.pofile import normalize, write_po

    buffer = io.BytesIO()
    write_po(buffer, catalogue, width=0, omit_header=False, include_previous=False, sort_output=False)
    text = buffer.getvalue().decode("utf-8")
    for message in catalogue:
        if message.id and message.previous_id:
            line = f"\nmsgid {normalize(message.id, width=0)}\n"
            previous = "\n#| ".join(normalize(message.previous_id[0], width=0).split("\n"))
            text = text.replace(line, f"\n#| msgid {previous}{line}", 1)
    po.parent.mkdir(parents=True, exist_ok=True)
    po.write_bytes(text.encode("utf-8"))


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


def similarity(a: str, b: str) -> float:
    """``difflib``'s ratio of two English texts: 1 when equal, 0 when nothing is shared."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def keep_as_fuzzy(catalogue, stale: dict) -> list[tuple[str, str]]:
    """Give each new, untranslated message of ``catalogue`` the translation of the most similar stale entry of
    ``stale`` ({old msgid: its Message}) when their ratio is at least :data:`SIMILAR`, marked fuzzy with the old
    msgid as its previous one; each stale entry is used once, the most similar pairs first.  Returns the
    (old msgid, new msgid) pairs kept."""
    new = [m for m in catalogue if m.id and not m.string]
    old = [m for m in stale.values() if m.id and m.string and isinstance(m.id, str)]
    pairs = []
    for n in new:
        for o in old:
            matcher = difflib.SequenceMatcher(None, o.id, n.id, autojunk=False)
            if matcher.real_quick_ratio() >= SIMILAR and matcher.quick_ratio() >= SIMILAR and matcher.ratio() >= SIMILAR:
                pairs.append((matcher.ratio(), o, n))
    kept, used_old, used_new = [], set(), set()
    for _ratio, o, n in sorted(pairs, key=lambda p: -p[0]):
        if o.id in used_old or n.id in used_new:
            continue
        used_old.add(o.id)
        used_new.add(n.id)
        n.string, n.previous_id = o.string, [o.id]
        n.flags.add("fuzzy")
        kept.append((o.id, n.id))
    return kept


def update(page: str, pot: Path) -> list[tuple[str, str]]:
    """Bring the page's catalogue up to its template: new messages added (a changed one keeping its old translation
    as fuzzy, :func:`keep_as_fuzzy`, the others empty), entries no page has dropped.  Returns the fuzzy pairs made."""
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
    previous = {m.id: m.previous_id for m in catalogue if m.id and m.fuzzy and m.previous_id}
    catalogue.update(template, no_fuzzy_matching=True)
    catalogue.creation_date = created  # no churn in a catalogue whose messages did not change
    for message in catalogue:  # a fuzzy entry still awaiting review keeps the English it was translated from
        if message.id:
            message.previous_id = previous.get(message.id, []) if message.fuzzy else []
    kept = keep_as_fuzzy(catalogue, dict(catalogue.obsolete))
    catalogue.obsolete.clear()
    write_catalogue(catalogue, po)
    return kept


def needs_review(page: str) -> list[str]:
    """The msgids of the page's catalogue marked fuzzy: translations of an older English text, to be checked."""
    po = CATALOGUES / f"{page}.po"
    return [m.id for m in read_catalogue(po) if m.id and m.fuzzy] if po.is_file() else []


def first_words(text: str, n: int = 8) -> str:
    """The first ``n`` words of ``text``, with "..." when there are more."""
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pot", type=Path, default=None, help="keep the extracted .pot files in this folder")
    parser.add_argument("--update", action="store_true",
                        help="bring the .po files up to the pages (new messages, changed ones kept as fuzzy)")
    args = parser.parse_args(argv)
    keep = args.pot is not None
    pot_dir = args.pot if keep else Path(tempfile.mkdtemp(prefix="hypviz-pot-"))
    try:
        for page, pot in extract(pot_dir).items():
            if args.update:
                for _old, changed in update(page, pot):
                    print(f"{page}: kept the old translation as fuzzy (review it): {first_words(changed)!r}")
            total, missing = coverage(page, pot)
            review = needs_review(page)
            print(f"{page}: {total - len(missing)}/{total} translated" + (f", {len(review)} to review (fuzzy)" if review else ""))
    finally:
        if not keep:
            shutil.rmtree(pot_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
