"""The one rule for labels. A label names a side in every report and, with several
candidates, a folder (`candidates/LABEL`), so it must be a file name on every system:
1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit. The rule is
checked wherever a label is given (collect, run) or read (compare's candidates), before
anything is sent or written."""

from __future__ import annotations

import re

from ..errors import QuantcheckError

LABEL_CHARACTERS = 64
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_OUTSIDE = re.compile(r"[^A-Za-z0-9._-]")
RULE = (f"a label is 1 to {LABEL_CHARACTERS} letters, digits, '.', '_' or '-', starting "
        "with a letter or digit (it names the side in reports and the folder "
        "candidates/LABEL)")


class LabelError(QuantcheckError):
    """A label that breaks the rule; the message says where it was given or read."""


def is_label(text: str) -> bool:
    # fullmatch: `$` would also match before a final newline
    return _LABEL.fullmatch(text) is not None


def check_label(label: str, where: str, fix: str = "") -> str:
    """`label` when it keeps the rule; else a LabelError naming `where` it came from
    (an option, or a run's manifest), the rule and the `fix`."""
    if not is_label(label):
        raise LabelError(f"{where} {shown(label)} breaks the rule for labels: {RULE}"
                         + (f"; {fix}" if fix else ""))
    return label


def label_from_name(name: str) -> str:
    """A label made from a folder's name (a side's default label): characters outside
    the rule become '_', cut to the length the rule allows."""
    label = _OUTSIDE.sub("_", name).lstrip("._-")[:LABEL_CHARACTERS]
    return label if is_label(label) else "run"


def shown(label: str) -> str:
    """A label as an error message shows it: quoted, control characters escaped, a
    long one cut with its length said."""
    if len(label) <= LABEL_CHARACTERS:
        return repr(label)
    return f"{label[:40]!r}... ({len(label):,} characters)"
