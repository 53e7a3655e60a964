"""The Simplified Chinese edition: every message of every page translated, except the pages listed here.

The messages are extracted from the site's own sources (Sphinx's gettext builder over the source
folder ``scripts/site.py`` lays out, ``scripts/translations.py``), so a paragraph, heading, list
item, table cell or caption added to a notebook or a page shows up here until its catalogue
``docs/locale/zh_CN/LC_MESSAGES/<page>.po`` translates it.  The terms follow
``docs/locale/zh_CN/GLOSSARY.md``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_translations_script", ROOT / "scripts" / "translations.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
translations = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(translations)

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

GLOSSARY = ROOT / "docs" / "locale" / "zh_CN" / "GLOSSARY.md"

# The pages whose Chinese translation is not complete yet: none (every page is translated).  A page
# may be listed here only while it is being written; the list only shrinks: a listed page that
# becomes fully translated fails test_listed_pages_are_not_yet_translated until it is taken off.
NOT_YET_TRANSLATED: tuple[str, ...] = ()

# the landing page's quotation of the thread: its Chinese page shows the Chinese original above,
# so the English rendering is replaced by a note saying so, not translated back
NOT_TRANSLATED_BACK = ("In English: *",)


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """{page: its extracted .pot file}, one gettext build for the module."""
    return translations.extract(tmp_path_factory.mktemp("pot"))


def _prose(text: str) -> str:
    """A message without its formulas, code, link targets, URLs, quoted titles or strings and dotted names.

    A dotted name (``hypviz.attention.Comparison`` in a type expression) is an identifier, kept as it is.
    """
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.S)
    text = re.sub(r"``.*?``|`[^`]*`|<https?://[^>]*>|\]\([^)]*\)|https?://\S+", " ", text, flags=re.S)
    text = re.sub(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", " ", text)
    return re.sub(r"\*\*\"[^\"]*\"\*\*|\"[^\"]*\"", " ", text)


def _english_prose(text: str) -> bool:
    """Three English words in a row outside formulas and code: text a reader needs translated.

    A type expression of the API pages (``torch.Tensor or None``, ``list of int``) is identifiers, not
    prose (its translation is itself: Sphinx links each type name).
    """
    if re.fullmatch(r"(?:(?:list|tuple|dict|set) of )?[\w.]+(?:(?:,| or) [\w.]+)*", text):
        return False
    return re.search(r"[A-Za-z]{2,}[,;:]?\s+[A-Za-z]{2,}[,;:]?\s+[A-Za-z]{3,}", _prose(text)) is not None


def _catalogue(page: str):
    path = translations.CATALOGUES / f"{page}.po"
    return translations.read_catalogue(path) if path.is_file() else None


def _glossary_table(heading: str) -> list[list[str]]:
    text = GLOSSARY.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # header and rule off


def _translated_pages(templates) -> list[str]:
    return [page for page in templates if page not in NOT_YET_TRANSLATED]


# ----------------------------------------------------------------------------- the measure itself


def test_coverage_counts_empty_fuzzy_and_absent_translations_as_missing(tmp_path, monkeypatch):
    pot = tmp_path / "page.pot"
    pot.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
        'msgid "translated"\nmsgstr ""\n\nmsgid "empty"\nmsgstr ""\n\n'
        'msgid "fuzzy"\nmsgstr ""\n\nmsgid "absent"\nmsgstr ""\n',
        encoding="utf-8",
    )
    (tmp_path / "page.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'
        'msgid "translated"\nmsgstr "已翻译"\n\nmsgid "empty"\nmsgstr ""\n\n'
        '#, fuzzy\nmsgid "fuzzy"\nmsgstr "模糊"\n',
        encoding="utf-8",
    )
    monkeypatch.setattr(translations, "CATALOGUES", tmp_path)
    assert translations.coverage("page", pot) == (4, ["empty", "fuzzy", "absent"])


def test_every_message_of_a_page_is_translated(templates):
    """Each page not listed in NOT_YET_TRANSLATED: every message has a non-empty, non-fuzzy msgstr.  A fuzzy entry (the
    old translation of a changed paragraph, kept by ``--update``) is listed on a line of its own, as needing review."""
    assert "index" in templates and "notebooks/01_lorentzian_inner_product" in templates, sorted(templates)
    report = []
    for page in _translated_pages(templates):
        total, missing = translations.coverage(page, templates[page])
        fuzzy = set(translations.needs_review(page))
        untranslated = [m for m in missing if m not in fuzzy]
        po = f"docs/locale/zh_CN/LC_MESSAGES/{page}.po"
        if untranslated:
            shown = "\n".join(f"    {m[:100]!r}" for m in untranslated[:8])
            report.append(f"{page}: {len(untranslated)} of {total} messages untranslated "
                          f"({po}; python scripts/translations.py --update adds them)\n{shown}")
        report += [f"{po}: needs review (fuzzy: its English changed): {translations.first_words(m)!r}"
                   for m in missing if m in fuzzy]
    assert not report, "untranslated on the Chinese site:\n" + "\n".join(report)


def _po_header() -> str:
    return 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=utf-8\\n"\n\n'


def test_update_keeps_the_translation_of_a_changed_paragraph_as_fuzzy(tmp_path, monkeypatch):
    """``--update``: a paragraph whose only change is 11 -> 12 keeps its translation, fuzzy, with the old English as its
    previous msgid; a new paragraph unlike any old one gets an empty msgstr; the test above lists the fuzzy one."""
    old = "Every notebook (01 to 11) is translated in full, with the identities and the references."
    changed = old.replace("11", "12")
    unlike = "A paragraph with nothing in common."
    monkeypatch.setattr(translations, "CATALOGUES", tmp_path)
    (tmp_path / "page.po").write_text(
        _po_header() + f'msgid "{old}"\nmsgstr "全部笔记本（01 至 11）均已完整翻译。"\n\n'
        'msgid "Kept as it is."\nmsgstr "保持原样。"\n\nmsgid "Gone and unlike the rest."\nmsgstr "已删除。"\n',
        encoding="utf-8")
    pot = tmp_path / "page.pot"
    pot.write_text(_po_header() + f'msgid "Kept as it is."\nmsgstr ""\n\nmsgid "{changed}"\nmsgstr ""\n\n'
                   f'msgid "{unlike}"\nmsgstr ""\n', encoding="utf-8")
    unlike_score = translations.similarity("Gone and unlike the rest.", unlike)
    assert translations.similarity(old, changed) >= translations.SIMILAR > unlike_score
    assert translations.update("page", pot) == [(old, changed)]
    for _ in range(2):  # a second update keeps the fuzzy entry and its previous msgid as they are
        text = (tmp_path / "page.po").read_text(encoding="utf-8")
        assert f'#, fuzzy\n#| msgid "{old}"\nmsgid "{changed}"\nmsgstr "全部笔记本（01 至 11）均已完整翻译。"' in text, text
        assert f'msgid "{unlike}"\nmsgstr ""' in text and "已删除" not in text and 'msgstr "保持原样。"' in text
        assert translations.update("page", pot) == []
    assert translations.needs_review("page") == [changed]
    assert translations.coverage("page", pot) == (3, [changed, unlike])
    # reviewed: the translator edits the msgstr and deletes the two lines; the next update leaves it translated
    (tmp_path / "page.po").write_text(text.replace(f'#, fuzzy\n#| msgid "{old}"\n', "").replace("11）", "12）"), encoding="utf-8")
    translations.update("page", pot)
    assert translations.needs_review("page") == [] and translations.coverage("page", pot) == (3, [unlike])
    assert "#|" not in (tmp_path / "page.po").read_text(encoding="utf-8")


def test_each_old_translation_is_kept_for_one_changed_paragraph_the_closest(tmp_path, monkeypatch):
    monkeypatch.setattr(translations, "CATALOGUES", tmp_path)
    old = "The sweep runs over 20 draws of 256 queries and keys at each norm."
    closer, farther = old.replace("20", "21"), old.replace("20 draws", "40 fresh draws")
    (tmp_path / "page.po").write_text(_po_header() + f'msgid "{old}"\nmsgstr "旧的译文。"\n', encoding="utf-8")
    pot = tmp_path / "page.pot"
    pot.write_text(_po_header() + f'msgid "{farther}"\nmsgstr ""\n\nmsgid "{closer}"\nmsgstr ""\n', encoding="utf-8")
    assert translations.similarity(old, farther) >= translations.SIMILAR
    assert translations.update("page", pot) == [(old, closer)]
    assert translations.needs_review("page") == [closer]


def test_listed_pages_are_not_yet_translated(templates):
    """The list of untranslated pages names real pages that still lack translations (it only shrinks)."""
    unknown = [page for page in NOT_YET_TRANSLATED if page not in templates]
    assert not unknown, f"NOT_YET_TRANSLATED names pages the site does not have: {unknown}"
    done = [page for page in NOT_YET_TRANSLATED if not translations.coverage(page, templates[page])[1]]
    assert not done, f"fully translated now, take them off NOT_YET_TRANSLATED (and the landing page's list): {done}"


def test_no_english_passed_off_as_a_translation(templates):
    """A msgstr that repeats an English sentence of its msgid is a copy, not a translation.

    A display equation is translated to itself (test_display_maths_is_left_as_it_is), ``\\text{for any
    norm}`` included: it is not a copy.
    """
    copied = []
    for page in templates:
        catalogue = _catalogue(page)
        if catalogue is None:
            continue
        for message in catalogue:
            if message.id and message.string == message.id and _english_prose(message.id) and not _maths_block(message.id):
                copied.append(f"{page}: {message.id[:100]!r}")
    assert not copied, "English copied as its own translation:\n" + "\n".join(copied)


def test_translations_keep_the_formulas(templates):
    """Every inline formula of a translated message is in its translation, character for character."""
    changed = []
    for page in _translated_pages(templates):
        for message in _catalogue(page):
            if not message.id or not message.string or message.id.startswith(NOT_TRANSLATED_BACK):
                continue
            # a ``$`` in inline code (an RST page's literal) is no formula delimiter
            text = re.sub(r"\$\$.*?\$\$|``.*?``", " ", message.id, flags=re.S)
            for formula in re.findall(r"\$[^$]+\$", text):
                if formula not in message.string:
                    changed.append(f"{page}: {formula!r} in {message.id[:80]!r}")
    assert not changed, "formulas changed or lost in translation:\n" + "\n".join(changed)


def test_numbered_headings_stay_headings(templates):
    """A heading "3. Lifting ..." is translated as "3\\. ...": unescaped, MyST reads "3. ..." as a list
    item, Sphinx refuses the translation and the heading stays English."""
    wrong = []
    for path in sorted(translations.CATALOGUES.rglob("*.po")):
        for message in translations.read_catalogue(path):
            if message.id and message.string and re.match(r"\d+\. ", message.string):
                wrong.append(f"{path.name}: {message.string[:60]!r}")
    assert not wrong, "numbered headings without the escaped dot (write 3\\. ...):\n" + "\n".join(wrong)


def _maths_block(msgid: str) -> bool:
    """A display-maths block's message: TeX commands, no inline ``$``, no code (a paragraph has those)."""
    return "$" not in msgid and "`" not in msgid and re.search(r"\\[A-Za-z]+", msgid) is not None


def test_display_maths_is_left_as_it_is(templates):
    """A display equation's message is translated to itself: Sphinx re-parses a changed maths block as
    text (it renders as ``::``), and formulas are not translated anyway."""
    changed = []
    for path in sorted(translations.CATALOGUES.rglob("*.po")):
        for message in translations.read_catalogue(path):
            if message.id and message.string and _maths_block(message.id) and message.string != message.id:
                changed.append(f"{path.name}: {message.id[:80]!r}")
    assert not changed, "display maths changed in translation (give it msgstr = msgid):\n" + "\n".join(changed)


# ----------------------------------------------------------------------------- the glossary


def test_glossary_terms_are_used_on_translated_pages(templates):
    """Where the English says a glossary term, the Chinese of a translated page says its Chinese term."""
    terms = _glossary_table("Terms")
    assert len(terms) >= 40, f"the glossary's table of terms was not read: {terms[:3]}"
    inconsistent = []
    for english, chinese, _note in terms:
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(f.strip()) for f in english.split(" / ")) + r")\b", re.IGNORECASE)
        for page in _translated_pages(templates):
            for message in _catalogue(page):
                if not message.id or not message.string or message.id.startswith(NOT_TRANSLATED_BACK):
                    continue
                if _maths_block(message.id):  # formulas stay as they are, \text{...} included
                    continue
                if re.fullmatch(r"[\w.]+", message.id):  # a module's name (an API page's title) is an identifier
                    continue
                if pattern.search(_prose(message.id)) and chinese not in message.string:
                    inconsistent.append(f"{page}: {english!r} without {chinese!r}: {message.string[:90]!r}")
    assert not inconsistent, "glossary terms not used (docs/locale/zh_CN/GLOSSARY.md):\n" + "\n".join(inconsistent)


def test_wrong_terms_are_absent(templates):
    """The glossary's wrong forms: nowhere (every page) or not on a fully translated page."""
    wrong = _glossary_table("Wrong forms")
    assert any(row[0] == "上半叶" for row in wrong) and all(row[3] in ("every page", "translated pages") for row in wrong), wrong
    translated = set(_translated_pages(templates))
    found = []
    for path in sorted(translations.CATALOGUES.rglob("*.po")):
        page = str(path.relative_to(translations.CATALOGUES).with_suffix(""))
        strings = [m.string for m in translations.read_catalogue(path) if m.id and m.string]
        for never, _why, use, scope in wrong:
            if scope == "every page" or page in translated:
                found += [f"{page}: {never!r} (use {use!r}) in {s[:90]!r}" for s in strings if never in s]
    assert not found, "wrong terms in the catalogues:\n" + "\n".join(found)


def test_verdict_keeps_at_least(templates):
    """A map's verdict is that of *at least* 90 % of its rows: the Chinese keeps the 'at least'."""
    dropped = []
    for path in sorted(translations.CATALOGUES.rglob("*.po")):
        for message in translations.read_catalogue(path):
            if message.id and message.string and "90 %" in message.id and "verdict" in message.id:
                if "至少 90 %" not in message.string:
                    dropped.append(f"{path.name}: {message.string[:120]!r}")
    assert not dropped, "the verdict rule without 至少 (at least):\n" + "\n".join(dropped)


# ----------------------------------------------------------------------------- the landing page


def test_landing_page_says_which_pages_are_translated(templates):
    """The landing page names, in both languages, the notebooks translated in full and those not yet."""
    catalogue = _catalogue("index")
    statement = [m for m in catalogue if m.id and m.id.startswith("**The Simplified Chinese edition**")]
    if not any(page.startswith("notebooks/") for page in NOT_YET_TRANSLATED):
        return  # every notebook translated: nothing left to announce
    assert len(statement) == 1, "the landing page (docs/index.md) has no paragraph saying which pages are translated"
    english, chinese = statement[0].id, statement[0].string
    notebooks = sorted(p for p in templates if p.startswith("notebooks/"))
    full = {p.split("/")[1][:2] for p in notebooks if p not in NOT_YET_TRANSLATED}
    partial = {p.split("/")[1][:2] for p in notebooks if p in NOT_YET_TRANSLATED}
    for text, separator in ((english, ";"), (chinese, "；")):
        assert separator in text, text
        first, second = text.split(separator, 1)
        assert set(re.findall(r"\b\d\d\b", first)) == full, (text, sorted(full))
        assert set(re.findall(r"\b\d\d\b", second)) == partial, (text, sorted(partial))
    assert "API" in english.split(";", 1)[1] and "API" in chinese.split("；", 1)[1], "the API pages are not translated yet"


# ----------------------------------------------------------------------------- figure captions

FIGURE_MIMES = ("image/png", "application/vnd.plotly.v1+json")
CAPTION_EN, CAPTION_ZH = "**Figure.** ", "**图。** "  # a caption's opening words (docs/_ext/hypviz_site.py: CAPTION_WORDS)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def figure_captions(nb: dict) -> list[tuple[int, str | None]]:
    """(cell index, its caption or None) for every cell of ``nb`` that draws a figure (a PNG or a plotly figure).

    The caption is the markdown cell right under the figure's cell when it opens with ``**Figure.** ``.
    """
    cells = nb["cells"]
    found = []
    for i, cell in enumerate(cells):
        outputs = cell.get("outputs", [])
        if cell["cell_type"] != "code" or not any(m in out.get("data", {}) for out in outputs for m in FIGURE_MIMES):
            continue
        below = cells[i + 1] if i + 1 < len(cells) else None
        text = "".join(below["source"]).strip() if below is not None and below["cell_type"] == "markdown" else ""
        found.append((i, text if text.startswith(CAPTION_EN) else None))
    return found


def test_the_caption_finder_sees_a_missing_caption():
    figure = {"cell_type": "code", "outputs": [{"data": {"image/png": "iVBOR"}}], "source": []}
    caption = {"cell_type": "markdown", "source": ["**Figure.** Titled *maps*: weight against key."]}
    prose = {"cell_type": "markdown", "source": ["The maps differ."]}
    assert figure_captions({"cells": [figure, caption, figure, prose, figure]}) == [
        (0, "**Figure.** Titled *maps*: weight against key."), (2, None), (4, None)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_a_caption_in_both_languages(path):
    """Every figure a notebook draws has a caption under it that says its titles and axes in words (the
    figures are drawn in English), and the Chinese page translates it: a msgstr opening with **图。**,
    in Chinese, with the caption's formulas."""
    import json

    captions = figure_captions(json.loads(path.read_text(encoding="utf-8")))
    missing = [i for i, text in captions if text is None]
    assert not missing, (
        f"{path.name}: figures without a caption (a markdown cell opening with {CAPTION_EN!r}) under cells {missing}")
    catalogue = _catalogue(f"notebooks/{path.stem}")
    untranslated = []
    for i, text in captions:
        entry = catalogue.get(text) if catalogue is not None else None
        chinese = entry.string if entry is not None and not entry.fuzzy else ""
        formulas = re.findall(r"\$[^$]+\$", text)
        if not (chinese.startswith(CAPTION_ZH) and len(re.findall(r"[\u4e00-\u9fff]", chinese)) >= 10
                and all(f in chinese for f in formulas)):
            untranslated.append(f"cell {i}: {chinese[:80]!r}")
    assert not untranslated, (
        f"{path.name}: captions not translated in docs/locale/zh_CN/LC_MESSAGES/notebooks/{path.stem}.po:\n"
        + "\n".join(untranslated))
