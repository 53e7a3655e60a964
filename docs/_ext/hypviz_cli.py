"""A Sphinx directive that documents an argparse parser from the parser itself.

    .. hypviz-argparse:: hypviz.cli:build_parser

For the parser and each of its sub-commands it writes a section with the usage line, the
description, the positional arguments and the options (each with its invocation, as ``--k K``,
and its help text with argparse's ``%(default)s`` expanded), and the epilog.  Help texts are
written for a terminal, not in reStructuredText (``sqrt(|x_s|^2 + k)`` is not a substitution),
so they are set as plain text, exactly as ``hypviz --help`` prints them.  Nothing is hand-copied:
the page changes when the parser does.
"""

from __future__ import annotations

import argparse
import importlib

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.util.nodes import make_id


def load_parser(spec: str) -> argparse.ArgumentParser:
    """``"package.module:function"`` -> the parser that function returns."""
    module_name, _, func = spec.partition(":")
    if not module_name or not func:
        raise ValueError(f"expected 'module:function', got {spec!r}")
    parser = getattr(importlib.import_module(module_name), func)()
    if not isinstance(parser, argparse.ArgumentParser):
        raise TypeError(f"{spec}() returned {type(parser).__name__}, not an argparse.ArgumentParser")
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each sub-command, in the order they were added."""
    subs = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            subs += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return subs


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def _invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return parser._get_formatter()._format_action_invocation(action)


def _paragraphs(text: str, classes: list[str] | None = None) -> list[nodes.Node]:
    return [nodes.paragraph(p, p, classes=classes or []) for p in (t.strip() for t in text.split("\n\n")) if p]


def _arguments(parser: argparse.ArgumentParser, positional: bool) -> nodes.definition_list | None:
    items = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if bool(action.option_strings) == positional:
            continue
        term = nodes.term()
        term += nodes.literal(text=_invocation(parser, action))
        body = nodes.definition()
        body += _paragraphs(_help(parser, action)) or [nodes.paragraph()]
        items.append(nodes.definition_list_item("", term, body))
    if not items:
        return None
    dl = nodes.definition_list(classes=["hypviz-cli-arguments"])
    dl += items
    return dl


def _section(parser: argparse.ArgumentParser, title: str, document) -> nodes.section:
    section = nodes.section(ids=[make_id(document.settings.env, document, "cli", title)])
    section += nodes.title(title, "", nodes.literal(text=title))
    usage = parser.format_usage().strip()
    block = nodes.literal_block(usage, usage, classes=["hypviz-cli-usage"])
    block["language"] = "text"
    section += block
    if parser.description:
        section += _paragraphs(parser.description)
    for positional, heading in ((True, "Arguments"), (False, "Options")):
        dl = _arguments(parser, positional)
        if dl is not None:
            section += nodes.rubric(heading, heading)
            section += dl
    subs = _subcommands(parser)
    if subs:
        section += nodes.rubric("Commands", "Commands")
        bullets = nodes.bullet_list()
        for name, _sub, summary in subs:
            para = nodes.paragraph()
            para += nodes.literal(text=f"{title} {name}")
            if summary:
                para += nodes.Text(f": {summary}")
            bullets += nodes.list_item("", para)
        section += bullets
    if parser.epilog:
        section += _paragraphs(parser.epilog, classes=["hypviz-cli-epilog"])
    return section


class ArgparseDirective(Directive):
    """``.. hypviz-argparse:: module:function`` (the function returns the parser)."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        document = self.state.document
        try:
            parser = load_parser(self.arguments[0])
        except Exception as exc:  # noqa: BLE001 - any failure becomes a located build warning
            raise self.error(f"hypviz-argparse: cannot build the parser {self.arguments[0]}: {exc}") from None
        prog = parser.prog
        out = [_section(parser, prog, document)]
        for name, sub, _summary in _subcommands(parser):
            out.append(_section(sub, f"{prog} {name}", document))
        return out


def setup(app):
    app.add_directive("hypviz-argparse", ArgparseDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
