"""gate/ladder_gate.py: the ladder fails on an onset within the lengths served, also
when the interval it lies in reaches into them, and never passes on rungs that were
not measured."""

from __future__ import annotations

import pytest

from quantcheck.gate.ladder_gate import decide_ladder
from quantcheck.store.records.ladder_records import NEEDLE, LadderProbe, ProbeResult, Rung
from quantcheck.triage.ladder import rung_figures

PROBE = LadderProbe(id="needle-d0", kind=NEEDLE, depth=0.0, code="12345")


def rung(tokens: int, departs: bool = False, answered: bool = True) -> Rung:
    result = ProbeResult(probe=PROBE, report="r", a_passed=True,
                         b_passed=(not departs) if answered else None, a_stable=True,
                         departs=departs)
    return rung_figures(tokens, [result])


LADDER = [rung(1024), rung(2048), rung(4096), rung(8192, departs=True)]


@pytest.mark.parametrize(
    ("rungs", "served", "passed", "reason"),
    [(LADDER, None, False, "B departs from A at 8,192 tokens, within every length"),
     (LADDER, 8192, False, "at 8,192 tokens, within the 8,192 tokens served"),
     (LADDER, 6000, False, "somewhere between 4,096 and 8,192 tokens, which reaches into"),
     (LADDER, 4096, True, "from 8,192 tokens, beyond the 4,096 tokens served"),
     (LADDER[:3], None, True, "no departure up to 4,096 tokens"),
     (LADDER[:3], 16384, False, "no departure up to 4,096 tokens, but the lengths up to "
                                "the 16,384 tokens served were not all measured"),
     ([rung(1024), rung(2048, answered=False)], None, False,
      "no departure up to 1,024 tokens, but the rungs beyond it were not all measured"),
     ([rung(1024, answered=False)], 1024, False, "no rung was measured on both sides")],
    ids=["anywhere", "at-served", "interval-reaches-in", "beyond-served", "none",
         "served-beyond-ladder", "rung-unmeasured", "nothing"],
)
def test_the_gate(rungs: list[Rung], served: int | None, passed: bool, reason: str) -> None:
    gate = decide_ladder(rungs, served)
    assert gate.passed is passed and gate.served_tokens == served
    assert reason in gate.reason
