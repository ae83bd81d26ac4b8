"""The built-in suites: each loads, is big enough, and means what it says (a reference
answer passes every expect, a non-answer fails it)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from quantcheck.store.inputs.haystack import TOKENS_PER_WORD, haystack
from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.inputs.suites import describe, suite_files, suite_names
from quantcheck.store.records.run_records import ToolCall
from quantcheck.triage.expects import check_answer, overall
from quantcheck.triage.sandbox import Limits, code_runner
from quantcheck.triage.signals import degenerate_reason

from .conftest import FIXTURES, invoke

SUITES = ["code", "facts", "json", "long-context", "long-generation", "math", "multilingual",
          "tools"]
ANSWERS: dict[str, dict[str, Any]] = yaml.safe_load(
    (FIXTURES / "suite_answers.yaml").read_text(encoding="utf-8"))


def test_every_promised_suite_ships_with_thirty_prompts_each_checked() -> None:
    assert suite_names() == SUITES
    prompts = load_prompts(suite_files(SUITES))  # ids unique across all suites
    for name in SUITES:
        suite = describe(name)
        assert suite.prompts >= 30, name
        assert suite.description
    assert all(p.expect is not None for p in prompts)


# The long-generation suite's reference answers are Python expressions (the fixture) over
# these helpers: a right answer of 2k to 16k tokens is made, not stored.
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n: int) -> str:
    """1 to 9,999 in English words: 'one thousand two hundred thirty-four'."""
    parts = []
    if n >= 1000:
        parts.append(f"{ONES[n // 1000]} thousand")
        n %= 1000
    if n >= 100:
        parts.append(f"{ONES[n // 100]} hundred")
        n %= 100
    if n >= 20:
        parts.append(TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else ""))
    elif n:
        parts.append(ONES[n])
    return " ".join(parts)


def roman(n: int) -> str:
    out = ""
    for value, letters in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"),
                           (90, "XC"), (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"),
                           (4, "IV"), (1, "I")):
        while n >= value:
            out, n = out + letters, n - value
    return out


def primes(count: int) -> list[int]:
    found: list[int] = []
    n = 2
    while len(found) < count:
        if all(n % p for p in found if p * p <= n):
            found.append(n)
        n += 1
    return found


def fibonacci(count: int) -> list[int]:
    numbers = [1, 1]
    while len(numbers) < count:
        numbers.append(numbers[-1] + numbers[-2])
    return numbers[:count]


def story(chapters: int, words: int, seed: int, names: list[str], finale: str) -> str:
    """A story of `chapters` chapters of about `words` words in all, naming `names`, its
    last chapter holding `finale`, ending with THE END."""
    each = max(10, int(words / chapters * 1.3))
    body = [f"Chapter {n}\n\n{haystack(each, 0.5, ' '.join(names) + ' went on.', seed + n)}"
            for n in range(1, chapters + 1)]
    return "\n\n".join(body) + f"\n\nAt last {names[0]} found {finale}.\n\nTHE END"


MONTHS = [("January", 31), ("February", 28), ("March", 31), ("April", 30), ("May", 31),
          ("June", 30), ("July", 31), ("August", 31), ("September", 30), ("October", 31),
          ("November", 30), ("December", 31)]
ELEMENT_NAMES = [tuple(pair.split(":")) for pair in (
    "H:Hydrogen He:Helium Li:Lithium Be:Beryllium B:Boron C:Carbon N:Nitrogen O:Oxygen "
    "F:Fluorine Ne:Neon Na:Sodium Mg:Magnesium Al:Aluminium Si:Silicon P:Phosphorus S:Sulfur "
    "Cl:Chlorine Ar:Argon K:Potassium Ca:Calcium Sc:Scandium Ti:Titanium V:Vanadium "
    "Cr:Chromium Mn:Manganese Fe:Iron Co:Cobalt Ni:Nickel Cu:Copper Zn:Zinc Ga:Gallium "
    "Ge:Germanium As:Arsenic Se:Selenium Br:Bromine Kr:Krypton Rb:Rubidium Sr:Strontium "
    "Y:Yttrium Zr:Zirconium Nb:Niobium Mo:Molybdenum Tc:Technetium Ru:Ruthenium Rh:Rhodium "
    "Pd:Palladium Ag:Silver Cd:Cadmium In:Indium Sn:Tin Sb:Antimony Te:Tellurium I:Iodine "
    "Xe:Xenon Cs:Caesium Ba:Barium La:Lanthanum Ce:Cerium Pr:Praseodymium Nd:Neodymium "
    "Pm:Promethium Sm:Samarium Eu:Europium Gd:Gadolinium Tb:Terbium Dy:Dysprosium "
    "Ho:Holmium Er:Erbium Tm:Thulium Yb:Ytterbium Lu:Lutetium Hf:Hafnium Ta:Tantalum "
    "W:Tungsten Re:Rhenium Os:Osmium Ir:Iridium Pt:Platinum Au:Gold Hg:Mercury Tl:Thallium "
    "Pb:Lead Bi:Bismuth Po:Polonium At:Astatine Rn:Radon Fr:Francium Ra:Radium "
    "Ac:Actinium Th:Thorium Pa:Protactinium U:Uranium Np:Neptunium Pu:Plutonium "
    "Am:Americium Cm:Curium Bk:Berkelium Cf:Californium Es:Einsteinium Fm:Fermium "
    "Md:Mendelevium No:Nobelium Lr:Lawrencium Rf:Rutherfordium Db:Dubnium Sg:Seaborgium "
    "Bh:Bohrium Hs:Hassium Mt:Meitnerium Ds:Darmstadtium Rg:Roentgenium Cn:Copernicium "
    "Nh:Nihonium Fl:Flerovium Mc:Moscovium Lv:Livermorium Ts:Tennessine Og:Oganesson"
).split()]


def _answer(reference: Any, code: bool = False) -> tuple[str, list[ToolCall]]:
    if isinstance(reference, dict) and "python" in reference:
        text = str(eval(reference["python"], {**globals(), "math": math}))  # our own fixture
        return (f"```python\n{text}\n```" if code else text), []
    if isinstance(reference, dict):
        return "", [ToolCall(name=c["name"], arguments=c["arguments"]) for c in reference["calls"]]
    return str(reference), []


@pytest.mark.parametrize("name", SUITES)
def test_a_reference_answer_passes_and_a_non_answer_fails(name: str) -> None:
    run_code = code_runner(Limits(wall_s=20, cpu_s=20))
    references = ANSWERS[name]
    prompts = load_prompts(suite_files([name]))
    assert set(references) == {p.id for p in prompts}
    for prompt in prompts:
        assert prompt.expect is not None
        text, calls = _answer(references[prompt.id], prompt.expect.code is not None)
        results = check_answer(prompt.expect, text, calls, run_code)
        assert overall(results) == "pass", (prompt.id, results)
        if prompt.category != "none needed":
            refusal = check_answer(prompt.expect, "I do not know.", [], run_code)
            assert overall(refusal) == "fail", prompt.id


def test_long_context_prompts_are_about_as_long_as_they_say() -> None:
    for prompt in load_prompts(suite_files(["long-context"])):
        words = len(prompt.request["messages"][0]["content"].split())
        target = {"2.5k": 2500, "10k": 10000, "16k": 16000}[prompt.category]
        assert target <= words * TOKENS_PER_WORD <= target * 1.05, prompt.id


def test_a_long_answer_that_degrades_late_fails_its_check_and_is_a_loop() -> None:
    """Each long-generation prompt's right answer, good for its first 70% and then
    looping to the length limit: its check fails (the middle or the end it reads is
    gone), and the degenerate check calls it a loop."""
    run_code = code_runner(Limits(wall_s=20, cpu_s=20))
    for prompt in load_prompts(suite_files(["long-generation"])):
        assert prompt.expect is not None
        text, _ = _answer(ANSWERS["long-generation"][prompt.id], prompt.expect.code is not None)
        good = text[:int(len(text) * 0.7)]
        looped = good + (" " + good[-200:]) * 40
        assert overall(check_answer(prompt.expect, looped, [], run_code)) == "fail", prompt.id
        assert degenerate_reason(looped, "length", "stop") == "repetition", prompt.id
        assert degenerate_reason(text, "length", "stop") == "length", prompt.id


def test_suites_join_prompts_on_the_command_line(tmp_path: Path) -> None:
    listed = invoke("suites")
    assert listed.exit_code == 0
    assert "json" in listed.output and "31 prompts" in listed.output
    unknown = invoke("collect", "--endpoint", "http://127.0.0.1:9/v1", "--suite", "jsn", "--out",
                     tmp_path / "run")
    assert unknown.exit_code == 2
    assert "unknown suite 'jsn'" in unknown.output and "json" in unknown.output
    nothing = invoke("collect", "--endpoint", "http://127.0.0.1:9/v1", "--out", tmp_path / "run")
    assert nothing.exit_code == 2 and "--suite NAME" in nothing.output


def test_a_long_context_prompt_is_shown_by_its_start_and_end(
        serve: Any, write_prompts: Any, tmp_path: Path) -> None:
    from quantcheck import CollectSettings, collect, compare_runs

    server = serve()
    prompts = write_prompts("""
        prompts:
          - id: needle
            prompt: "Read this. {haystack} What is the codeword?"
            haystack: {tokens: 3000, depth: 0.5, needle: The codeword is heron-7.}
    """)
    for side in ("a", "b"):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, top_logprobs=0, preflight=False))
    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    detail = json.loads((tmp_path / "report" / "details.jsonl").read_text().splitlines()[0])
    shown = detail["request"]["prompt"]
    assert len(shown) < 4200 and "characters not shown" in shown
    assert shown.startswith("Read this.") and shown.endswith("What is the codeword?")
