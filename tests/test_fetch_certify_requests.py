"""fetch/certify_requests.py: a prompt's request after a prefix (its question replaced
for a sibling), and every request recorded as sent, whatever its body, with any
credential cut and nothing else changed."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.fetch.certify_requests import RequestLog, with_prefix
from quantcheck.store.records.certificate_records import Probe, SentRequest


def test_a_prefix_goes_before_the_first_user_message_or_the_prompt() -> None:
    chat = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Capital of France?"},
                         {"role": "user", "content": "And Spain?"}]}
    assert with_prefix(chat, "river stone")["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "river stone\n\nCapital of France?"},
        {"role": "user", "content": "And Spain?"}]
    sibling = with_prefix(chat, "river stone", "Name a colour.")
    assert sibling["messages"][1]["content"] == "river stone\n\nName a colour."
    assert sibling["messages"][0] == chat["messages"][0]  # the system message shared
    assert with_prefix({"prompt": "Q: x"}, "", "Name a colour.") == {"prompt": "Name a colour."}
    assert with_prefix({"prompt": "Q: x"}, "") == {"prompt": "Q: x"}
    assert with_prefix({"prompt": [1, 2]}, "w") == {"prompt": [1, 2]}  # token ids: unchanged


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


@given(st.dictionaries(st.text(max_size=8), JSON, max_size=5), st.booleans(),
       st.sampled_from(["", "p"]))
def test_any_body_is_recorded_as_sent_or_with_its_credentials_cut(
        body: dict[str, object], stream: bool, prompt_id: str) -> None:
    recorded: list[SentRequest] = []
    log = RequestLog(lambda probe: body)
    log.record = recorded.append
    probe = Probe(factor="batch", level="batch=2", prompt_id=prompt_id, stream=stream)
    assert log.recorded(probe, body, "chat", (3, "", False)) == 0
    [sent] = recorded
    back = msgspec.json.decode(msgspec.json.encode(sent), type=SentRequest)
    assert back == sent and sent.round == 3 and sent.role == ("target" if prompt_id
                                                             else "filler")
    expected = {**body, "stream": True, "stream_options": {"include_usage": True}} \
        if stream else body
    assert sent.body == expected or (prompt_id and sent.redacted)


@pytest.mark.parametrize("secret", ["sk-live-0123456789abcdefghij", "hunter2hunter2"])
def test_a_credential_in_a_prompts_body_is_cut_and_said(
        monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    monkeypatch.setenv("SERVER_PASSWORD", "hunter2hunter2")
    body = {"model": "m", "prompt": "river stone\n\nQ: x", "api_key": secret}
    recorded: list[SentRequest] = []
    log = RequestLog(lambda probe: {"model": "m", "prompt": "Q: x", "api_key": secret})
    log.record = recorded.append
    log.recorded(Probe(factor="prefix", level="prefix=2", prompt_id="p"), body,
                 "completions", (0, "POST /flush_cache", True))
    [sent] = recorded
    assert secret not in str(sent.body) and sent.redacted
    assert sent.action == "POST /flush_cache" and sent.starts_cold
