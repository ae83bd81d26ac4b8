"""The determinism certificate's verdict (`quantcheck gate CERT_DIR`, and `determinism
--certify` with a limit): the policy's rules that apply to a certificate, gate.json,
and junit.xml with one test case per factor (a failure where the factor varied, with
its explanation and examples) and one per broken rule.

Rules: `nondeterministic_prompts` (prompts that vary under any factor, limit
`max_nondeterministic_prompts`, 0 by default: a certificate on which a prompt varied
does not pass), `untested_levels` (levels the plan holds that were not tested,
limit `max_untested_levels`, 0 by default: a certificate "certified in part" does not
pass unless the policy allows its untested levels; null turns it off) and
`failed_requests` (requests the plan sent that got no answer, limit
`max_failed_requests`, 0 by default: what was not answered was not tested). The
policy's other rules are about A/B reports and are not applied to a certificate.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from ..store.files import write_atomic
from ..store.folders.folder_kinds import CERTIFICATE, require_kind
from ..store.folders.report_dir import GATE_JSON, JUNIT_XML
from ..store.records.certificate_records import Certificate, read_certificate, require_its_answers
from ..triage.certificate_coverage import not_tested_phrase
from .explain import markdown_text
from .verdict import (
    GateResult,
    NothingCompared,
    Policy,
    Rule,
    rule_table,
    write_gate_json,
    xml_text,
)


def certificate_rules(certificate: Certificate, policy: Policy) -> list[Rule]:
    varying = sorted({r.prompt_id for r in certificate.prompt_results if r.mismatches})
    count = certificate.prompts_varying
    limit = policy.max_nondeterministic_prompts
    described = (f"{count} prompt{'' if count == 1 else 's'} vary: {certificate.explanation}"
                 if count else "no prompt varies")
    failed = certificate.failed_requests
    untested = sum(len(u.levels) for u in certificate.not_tested)
    untested_limit = policy.max_untested_levels
    return [
        Rule("nondeterministic_prompts", described, count, limit,
             limit is None or count <= limit, varying),
        Rule("untested_levels", f"{untested} planned level{'' if untested == 1 else 's'} "
             "not tested" + (f": {not_tested_phrase(certificate.not_tested)}" if untested
                             else ""), untested, untested_limit,
             untested_limit is None or untested <= untested_limit),
        Rule("failed_requests", f"{failed} request{'' if failed == 1 else 's'} of the plan "
             "without an answer (failed after retries: rerun the certificate)", failed,
             policy.max_failed_requests,
             policy.max_failed_requests is None or failed <= policy.max_failed_requests),
    ]


def decide_certificate(certificate: Certificate, policy: Policy) -> GateResult:
    """The verdict. A certificate that compared nothing (no answer to hold against
    another) is refused (NothingCompared), as an A/B report that compared nothing is."""
    if not certificate.comparisons:
        raise NothingCompared("the certificate compared nothing, so there is nothing to "
                              f"pass: {certificate.statement}")
    rules = certificate_rules(certificate, policy)
    return GateResult(verdict="pass" if all(rule.passed for rule in rules) else "fail",
                      rules=rules)


def gate_certificate(folder: Path, policy: Policy) -> tuple[GateResult, Certificate]:
    """Gate FOLDER/certificate.json; write FOLDER/gate.json and junit.xml."""
    require_kind(folder, CERTIFICATE, "the gate")
    certificate = read_certificate(folder)
    require_its_answers(folder, certificate)
    result = decide_certificate(certificate, policy)
    write_gate_json(result, folder / GATE_JSON)
    write_atomic(folder / JUNIT_XML, certificate_junit(certificate, result))
    return result, certificate


def certificate_markdown(result: GateResult, certificate: Certificate) -> str:
    """The verdict as the step summary's Markdown: the statement, each factor, each rule."""
    lines = [f"## quantcheck determinism: {'PASS' if result.passed else 'FAIL'}", "",
             f"**{markdown_text(certificate.endpoint)}** ({markdown_text(certificate.model)}): "
             f"{markdown_text(certificate.statement)}", "",
             "| factor | comparisons | mismatches | prompts varying | explanation |",
             "|---|---|---|---|---|"]
    lines += [f"| {f.factor} | {f.comparisons} | {f.mismatches} | {f.prompts_varying} of "
              f"{f.prompts} | {markdown_text(f.explanation)} |"
              for f in certificate.factors if f.comparisons]
    lines += ["", *rule_table(result.rules), "",
              f"Control: {markdown_text(certificate.control_note)}"]
    return "\n".join(lines) + "\n"


def certificate_junit(certificate: Certificate, result: GateResult) -> bytes:
    """One test case per factor that was tested, then one per broken rule."""
    suite = ElementTree.Element("testsuite", name="quantcheck.determinism", tests="0",
                                failures="0")
    tested = [f for f in certificate.factors if f.comparisons]
    for factor in tested:
        case = ElementTree.SubElement(suite, "testcase", name=factor.factor,
                                      classname="quantcheck.determinism")
        if factor.mismatches:
            failure = ElementTree.SubElement(
                case, "failure", type=factor.factor,
                message=xml_text(f"{factor.mismatches} mismatches in {factor.comparisons} "
                                 f"comparisons: {factor.explanation}"))
            failure.text = xml_text("\n".join(
                f"{e.prompt_id} at {e.level}: first differing token {e.first_divergence}"
                for e in certificate.examples if e.factor == factor.factor))
    broken = [rule for rule in result.rules if not rule.passed]
    for rule in broken:
        case = ElementTree.SubElement(suite, "testcase", name=rule.name,
                                      classname="quantcheck.policy")
        failure = ElementTree.SubElement(case, "failure", type=rule.name,
                                         message=xml_text(f"{rule.description} (limit "
                                                          f"{rule.limit})"))
        if rule.prompts:
            failure.text = xml_text("\n".join(rule.prompts))
    suite.set("tests", str(len(tested) + len(broken)))
    suite.set("failures", str(sum(1 for f in tested if f.mismatches) + len(broken)))
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suite)
