"""The determinism certificate's verdict: the `max_nondeterministic_prompts` rule and
junit.xml with one test case per factor (a failure where the factor varied, with its
explanation and examples)."""

from __future__ import annotations

from xml.etree import ElementTree

from ..store.certificate_records import Certificate
from .verdict import xml_text


def nondeterministic_prompts_problem(certificate: Certificate, limit: int | None
                                     ) -> str | None:
    """Why the certificate fails `max_nondeterministic_prompts`, or None (no limit
    given, or within it). Failed requests fail it too: what was not answered was not
    tested."""
    if limit is None:
        return None
    if certificate.failed_requests:
        return f"{certificate.failed_requests} requests failed: the plan was not completed"
    if certificate.prompts_varying > limit:
        return (f"{certificate.prompts_varying} prompts vary, more than "
                f"max_nondeterministic_prompts {limit}: {certificate.explanation}")
    return None


def certificate_junit(certificate: Certificate) -> bytes:
    """One test case per factor that was tested."""
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
    failing = sum(1 for f in tested if f.mismatches)
    if certificate.failed_requests:
        case = ElementTree.SubElement(suite, "testcase", name="requests",
                                      classname="quantcheck.determinism")
        ElementTree.SubElement(case, "failure", type="failed_requests",
                               message=f"{certificate.failed_requests} requests failed")
        failing += 1
    suite.set("tests", str(len(tested) + bool(certificate.failed_requests)))
    suite.set("failures", str(failing))
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suite)
