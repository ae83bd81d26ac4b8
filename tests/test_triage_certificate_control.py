"""A certificate's control, judged only where it can show something: never a clean
or a detected control of a run that answered nothing."""

from __future__ import annotations

import msgspec

from quantcheck.store.records.certificate_records import Certificate, Untested
from quantcheck.triage.certificate import certify
from quantcheck.triage.certificate_control import control_note, control_result, untested_control
from quantcheck.triage.certify_plan import make_plan


def certificate_of(comparisons: int, mismatches: int, failed: int) -> Certificate:
    plan = make_plan(["p"], 2, 2, 0, 8192, 16)
    made = certify([], plan, failed, "http://control/v1", "m", None, "")
    return msgspec.structs.replace(made, comparisons=comparisons, mismatches=mismatches,
                                   not_tested=[Untested(factor="cache", levels=["prefix=1"],
                                                        reason="off")])


def test_a_control_is_judged_only_where_it_can_show_something() -> None:
    nothing = control_result(certificate_of(0, 0, 40))
    assert not nothing.tested and not nothing.detected
    assert nothing.statement.startswith("it made no comparison (not certified: 40 requests")
    note = control_note(nothing)
    assert note.startswith("control not tested: http://control/v1: it made no comparison")
    assert "NOT detected" not in note and "was detected" not in note
    unanswered = control_result(certificate_of(10, 0, 3))
    assert not unanswered.tested and unanswered.statement.startswith("3 of its requests failed")
    varied = control_result(certificate_of(10, 2, 3))  # a mismatch shows variation is seen
    assert varied.tested and varied.detected
    assert control_note(varied).endswith("; the control's levels not tested: cached shared "
                                         "prefixes of 1 word (off)")
    clean = control_result(certificate_of(10, 0, 0))
    assert clean.tested and not clean.detected and "NOT detected" in control_note(clean)
    stopped = untested_control("http://control/v1", "its run stopped: HTTP 400")
    assert control_note(stopped).startswith("control not tested: http://control/v1: its run "
                                            "stopped: HTTP 400")
