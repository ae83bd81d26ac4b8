"""A determinism certificate's control, as the certificate reports it: detected when
it varied; not tested when it could show nothing (no comparison, or requests
unanswered where nothing varied: what did not answer might have varied), or when its
run stopped or has not run yet; its own untested levels said beside its result, its
figures per factor and level kept beside the target's."""

from __future__ import annotations

from ..store.records.certificate_records import Certificate, ControlResult
from .certificate_coverage import not_tested_phrase


def control_result(control: Certificate) -> ControlResult:
    """The control run, as the certificate reports it: detected when it varied; not
    tested when it could show nothing (no comparison, or requests unanswered where
    nothing varied: what did not answer might have)."""
    why = None
    if not control.mismatches and not control.comparisons:
        why = f"it made no comparison ({control.statement})"
    elif not control.mismatches and control.failed_requests:
        why = (f"{control.failed_requests} of its requests failed and the rest did not "
               "vary: what was not answered might have")
    return ControlResult(endpoint=control.endpoint, detected=control.mismatches > 0,
                         statement=why or control.statement, mismatches=control.mismatches,
                         comparisons=control.comparisons, tested=why is None,
                         not_tested=control.not_tested, factors=control.factors)


def untested_control(endpoint: str, why: str) -> ControlResult:
    """A control that could not be run to its end (unreachable, refused, stopped)."""
    return ControlResult(endpoint=endpoint, detected=False, statement=why, mismatches=0,
                         comparisons=0, tested=False)


NO_CONTROL = ("no control was run: this certificate does not show that the test would "
              "have seen variation on this setup (give --control URL of a configuration "
              "expected to vary)")


def control_note(control: ControlResult | None) -> str:
    if control is None:
        return NO_CONTROL
    if not control.tested:
        return (f"control not tested: {control.endpoint}: {control.statement}; this "
                "certificate does not show that the test would have seen variation on "
                "this setup")
    untested = (f"; the control's levels not tested: {not_tested_phrase(control.not_tested)}"
                if control.not_tested else "")
    if control.detected:
        return (f"the control {control.endpoint} was detected as varying "
                f"({control.mismatches} mismatches in {control.comparisons} comparisons)"
                + untested)
    return (f"the control {control.endpoint} was NOT detected as varying: this test could "
            "not tell a varying configuration on this setup, so a pass says little" + untested)
