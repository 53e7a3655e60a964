r"""What verifying a derivation found: one :class:`StepResult` per step, a :class:`Report` per derivation.

:meth:`hypviz.symbolic.steps.Derivation.verify` fills a :class:`Report`; :func:`hypviz.symbolic.verify_all`
collects one per derivation in :class:`Reports`.  A report counts what its checks are worth: each
step has a ``role`` (:data:`ROLES`), and only ``"proof"`` steps count as genuine checks, so a summary
reads "N genuine checks (+ M definitions/consequences/regressions)"; a failing step is named by
number and name, and :meth:`Report.raise_if_failed` turns a failure into a :class:`DerivationError`.

No sympy, no torch: plain Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, cast

__all__ = ["ROLES", "StepResult", "Report", "Reports", "DerivationError"]

#: What a step's check is worth; only ``"proof"`` counts as a genuine check.
ROLES = ("proof", "definition", "consequence", "regression")
_ROLE_PLURAL = {"definition": "definitions", "consequence": "consequences", "regression": "regressions"}


@dataclass(frozen=True)
class StepResult:
    """The outcome of checking one step (``index`` counts from 1; ``name`` and ``role`` as in
    :class:`~hypviz.symbolic.steps.Step`).

    ``ok`` says whether it verified, ``how`` by which transformation (or why not), ``components``
    the outcome of the explicit-coordinate re-check (``""`` when there was none).

    Examples
    --------
    >>> from hypviz.symbolic import lifted_norm
    >>> result = lifted_norm(d=2).verify().result("on_hyperboloid")
    >>> result.ok, result.label, result.role
    (True, 'step 2 (on_hyperboloid)', 'proof')
    """

    index: int
    ok: bool
    how: str
    components: str = ""
    name: str | None = None
    role: str = "proof"

    @property
    def label(self) -> str:
        """``"step 3 (identity_3)"``: the number and, when the step has one, the name."""
        return f"step {self.index}" + (f" ({self.name})" if self.name else "")

    def __str__(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        extra = f"; {self.components}" if self.components else ""
        tag = f" [{self.role}]" if self.role != "proof" else ""
        return f"  {mark} {self.label}{tag}: {self.how}{extra}"


def _count_roles(results: Iterable[StepResult]) -> tuple[int, str]:
    """The number of genuine checks, and the others as ``"1 definition, 3 consequences"``."""
    results = list(results)
    genuine = sum(1 for r in results if r.role == "proof")
    parts = []
    for role in ROLES[1:]:
        m = sum(1 for r in results if r.role == role)
        if m:
            parts.append(f"{m} {role if m == 1 else _ROLE_PLURAL[role]}")
    return genuine, ", ".join(parts)


def _genuine_text(results: Iterable[StepResult]) -> str:
    genuine, others = _count_roles(results)
    text = f"{genuine} genuine check" + ("" if genuine == 1 else "s")
    return text + (f" (+ {others})" if others else "")


class DerivationError(AssertionError):
    """A derivation step did not verify; the message names the derivation and the step.

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import Derivation, DerivationError, Step
    >>> x = sp.Symbol("x")
    >>> Derivation("A slip", [Step(x * x, 2 * x, "wrong", name="square")]).check()
    Traceback (most recent call last):
        ...
    hypviz.symbolic.step_report.DerivationError: A slip: FAILED at step 1 of 1 (square: ...); 1 failing
    ...
    >>> issubclass(DerivationError, AssertionError)
    True
    """


_TEX_SYMBOLS = {
    "langle": "⟨", "rangle": "⟩", "to": "→", "infty": "∞", "le": "≤", "ge": "≥", "Delta": "Δ", "tau": "τ",
    "kappa": "κ", "cdot": "·", "sup": "sup", "log": "log", "tanh": "tanh", "exp": "exp",
}


def _fraction(num: str, den: str) -> str:
    wrap = lambda t: t if re.fullmatch(r"[\w^²]+", t) else f"({t})"  # noqa: E731
    return f"{wrap(num)}/{wrap(den)}"


def plain_text(text: str) -> str:
    """``text`` with every ``$...$`` written in plain Unicode, for printed lines (no TeX left to read).

    Covers what the derivations' titles use: ``\\frac``, ``\\mathrm``, ``\\|``, the Greek letters and
    relations it knows, ``^2``; anything else keeps its letters without the backslash.
    """

    def convert(m: re.Match) -> str:
        t = re.sub(r"\\mathrm\{([^{}]*)\}", r"\1", m.group(1)).replace("\\|", "‖")
        t = re.sub(r"\\(langle)\s*", "⟨", t)
        t = re.sub(r"\\([A-Za-z]+)",
                   lambda s: s.group(0) if s.group(1) == "frac" else _TEX_SYMBOLS.get(s.group(1), s.group(1)), t)
        t = t.replace("^2", "²")
        t = re.sub(r"log\\frac\{([^{}]*)\}\{([^{}]*)\}", lambda f: f"log({_fraction(f.group(1), f.group(2))})", t)
        t = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", lambda f: _fraction(f.group(1), f.group(2)), t)
        return t.replace(" - ", " − ").replace("= -", "= −").replace("{", "").replace("}", "")

    return re.sub(r"\$([^$]+)\$", convert, text)


@dataclass
class Report:
    """The checks of one derivation: ``ok`` when every step verified; ``str()`` tells which did not.

    ``results`` holds one :class:`StepResult` per step, in order; ``d`` is the dimension of the
    explicit-coordinate re-check (``None``: none was made).

    Examples
    --------
    >>> import sympy as sp
    >>> from hypviz.symbolic import Derivation, Step
    >>> x = sp.Symbol("x")
    >>> steps = [Step(x + x, 2 * x, "sum", name="sum"), Step(x * x, 2 * x, "wrong", name="square")]
    >>> report = Derivation("A slip", steps).verify()
    >>> report.ok, report.first_failure.label, report.result("sum").ok
    (False, 'step 2 (square)', True)
    """

    title: str
    results: list[StepResult] = field(default_factory=list)
    d: int | None = None

    @property
    def ok(self) -> bool:
        """Whether every step verified."""
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> list[StepResult]:
        """The results of the steps that did not verify, in order."""
        return [r for r in self.results if not r.ok]

    @property
    def first_failure(self) -> StepResult | None:
        """The first step that did not verify, or ``None``."""
        bad = self.failures
        return bad[0] if bad else None

    @property
    def genuine(self) -> int:
        """How many steps are genuine checks (role ``"proof"``)."""
        return _count_roles(self.results)[0]

    def result(self, name: str) -> StepResult:
        """The result of the step called ``name``.

        Raises
        ------
        KeyError
            When no step has that name (the message lists the names).
        """
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"{self.title!r} has no step named {name!r}; steps: {[r.name for r in self.results]}")

    def summary(self) -> str:
        """One line, e.g. ``"<title>: all 9 steps verified: 5 genuine checks (+ 1 definition, 3 consequences)"``.

        Printed text, so the title's ``$...$`` maths is written in plain Unicode (:func:`plain_text`).
        On a failure: the number, name and reason of the first failing step and how many failed.
        """
        n = len(self.results)
        title = plain_text(self.title)
        if self.ok:
            where = f"; re-checked with d = {self.d} explicit coordinates" if self.d else ""
            return f"{title}: all {n} steps verified: {_genuine_text(self.results)}{where}"
        first = cast(StepResult, self.first_failure)  # not ok: a step failed
        what = f"{first.name}: {first.how}" if first.name else first.how
        return f"{title}: FAILED at step {first.index} of {n} ({what}); {len(self.failures)} failing"

    def raise_if_failed(self) -> Report:
        """Return ``self`` when every step verified.

        Raises
        ------
        DerivationError
            Naming the first failing step, with every failing step listed.
        """
        if not self.ok:
            raise DerivationError(self.summary() + "\n" + "\n".join(str(r) for r in self.failures))
        return self

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return self.summary()


class Reports(list):
    """The reports of :func:`hypviz.symbolic.verify_all`, one per derivation; prints one line per derivation.

    Examples
    --------
    >>> from hypviz.symbolic import Reports, lifted_norm, time_taylor
    >>> reports = Reports([lifted_norm(d=2).verify(), time_taylor().verify()])
    >>> reports.ok, len(reports), reports.genuine == sum(r.genuine for r in reports)
    (True, 2, True)
    """

    @property
    def ok(self) -> bool:
        """Whether every step of every derivation verified."""
        return all(r.ok for r in self)

    @property
    def genuine(self) -> int:
        """How many steps of all the derivations are genuine checks."""
        return sum(r.genuine for r in self)

    def __repr__(self) -> str:
        results = [res for r in self for res in r.results]
        head = (f"{len(self)} derivations, {len(results)} steps: " + ("all verified" if self.ok else "FAILURES")
                + f"; {_genuine_text(results)}")
        return "\n".join([head] + ["  " + r.summary() for r in self])

    __str__ = __repr__
