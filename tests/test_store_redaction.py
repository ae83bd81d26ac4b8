"""store/redaction.py, property-based: any URL holding a user, a password or a key in
its query, any credential header, bearer token, `--api-key`-like option or key-shaped
string, wherever it sits in a text, comes out without the secret; text holding none
comes out unchanged; and no text costs more than linear time."""

from __future__ import annotations

import os
import string
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from quantcheck.store.redaction import (
    REDACTED,
    SECRET_WORDS,
    command_secrets,
    environment_secrets,
    redact,
    redact_command,
    secret_name,
)

EXAMPLES = int(os.environ.get("QUANTCHECK_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True)

# A secret long and odd enough that finding it in the output means it leaked.
SECRET = st.text(string.ascii_letters + string.digits + "-._~", min_size=10, max_size=24
                 ).map(lambda tail: "Zq7" + tail)
# What a password may hold in a URL (percent-encoded or as sub-delims), spaces aside.
PASSWORD = st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=%:@",
                   min_size=10, max_size=24).map(lambda tail: "Zq7" + tail)
HOST = st.sampled_from(["127.0.0.1", "gpu-7.internal", "[::1]", "example.com", "localhost"])
PORT = st.sampled_from(["", ":8000", ":443"])
PATH = st.sampled_from(["", "/v1", "/api/v1", "/proxy/v1/"])
QUERY_SECRETS = st.sampled_from(["token", "api_key", "apikey", "key", "access_token",
                                 "X-Amz-Signature", "client_secret", "password", "sig",
                                 "auth", "api-key", "Token"])
PLAIN_PARAMS = st.sampled_from(["page", "model", "max_tokens", "api-version", "lang",
                                "format", "n"])
PLAIN_VALUE = st.text(string.ascii_letters + string.digits + "-.", min_size=1, max_size=8)
# How a URL is found in text: bare, quoted, in a repr, as an option's value, in JSON.
CONTEXTS = st.sampled_from(["{}", "'{}'", "URL('{}')", "--endpoint {}", '{{"url": "{}"}}',
                            "cannot reach {}: refused", "<{}>", "({})"])
WORD = st.text(string.ascii_letters + string.digits + ".,:;()-'\"", min_size=1, max_size=12)


def plain_word(word: str) -> bool:
    lowered = word.lower()
    return not any(w in lowered for w in (*SECRET_WORDS, "bearer", "authorization",
                                          "sk-", "hf_", "gh", "github_pat"))


PROSE = st.lists(WORD.filter(plain_word), max_size=8).map(" ".join)


@st.composite
def secret_urls(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A URL with a user and password and secrets in its query, and the secrets."""
    user, password = draw(SECRET), draw(PASSWORD)
    names = draw(st.lists(QUERY_SECRETS, min_size=0, max_size=2))
    values = [draw(SECRET) for _ in names]
    plain = [f"{draw(PLAIN_PARAMS)}={draw(PLAIN_VALUE)}" for _ in range(draw(
        st.integers(0, 2)))]
    query = "&".join(draw(st.permutations([*(f"{n}={v}" for n, v in zip(names, values,
                                                                          strict=True)),
                                           *plain])))
    url = (f"{draw(st.sampled_from(['http', 'https']))}://{user}:{password}@"
           f"{draw(HOST)}{draw(PORT)}{draw(PATH)}{'?' + query if query else ''}")
    return url, [user, password, *values]


@FUZZ
@given(secret_urls(), CONTEXTS, PROSE, PROSE)
def test_no_url_credential_survives_in_any_context(
        url_and_secrets: tuple[str, list[str]], context: str, before: str, after: str) -> None:
    url, secrets = url_and_secrets
    text = f"{before} {context.format(url)} {after}"
    shown = redact(text)
    for secret in secrets:
        assert secret not in shown, (text, shown)
    assert before in shown and after in shown


@FUZZ
@given(st.sampled_from(["Authorization", "authorization", "Proxy-Authorization",
                        "x-api-key", "X-Api-Key", "api-key", "X-Auth-Token", "Cookie"]),
       st.sampled_from(["Bearer ", "Basic ", "Token ", ""]), SECRET,
       st.sampled_from(["{h}: {v}", "'{h}': '{v}'", '"{h}": "{v}"', "{h}={v}",
                        "<CIMultiDict('{h}': '{v}')>"]), PROSE)
def test_no_header_credential_survives(header: str, scheme: str, secret: str, form: str,
                                       prose: str) -> None:
    shown = redact(f"{prose} " + form.format(h=header, v=scheme + secret) + f" {prose}")
    assert secret not in shown and REDACTED in shown


@FUZZ
@given(SECRET, st.sampled_from(["--api-key {}", "--api-key={}", "--token {}",
                                "--judge-api-key={}", "--password '{}'", "Bearer {}",
                                "bearer {}", "api_key='{}'", '"client_secret": "{}"',
                                "password=\"{}\"", "sk-{}xxxxxxxxxxxxxxxx",
                                "hf_{}aaaaaaaaaaaaaaaaaaaa"]), PROSE)
def test_no_option_token_or_key_shaped_value_survives(secret: str, form: str,
                                                      prose: str) -> None:
    secret = "".join(filter(str.isalnum, secret))  # what every key shape allows
    shown = redact(f"{prose} {form.format(secret)} {prose}")
    assert secret not in shown, shown


@FUZZ
@given(st.lists(st.one_of(
    PROSE,
    st.builds("http://{}{}{}?{}={}".format, HOST, PORT, PATH, PLAIN_PARAMS, PLAIN_VALUE),
    st.sampled_from(["--api-key-env OPENAI_API_KEY", "--max-tokens 64", "max_tokens=64",
                     "'max_tokens': 64", "api_key_env='VAR'", "the prompt_tokens count",
                     "see docs/collecting.md#errors", "a@b (no scheme)", "sort_keys=True",
                     "HTTP 401: invalid credentials", "Authorization failed"])),
    max_size=6).map(" ".join))
def test_text_without_credentials_comes_back_unchanged(text: str) -> None:
    assert redact(text) == text


@FUZZ
@given(st.text(max_size=200), st.lists(SECRET, max_size=3))
def test_any_text_is_redacted_once_for_all_and_never_raises(
        text: str, secrets: list[str]) -> None:
    shown = redact(text, secrets)
    assert redact(shown, secrets) == shown
    for secret in secrets:
        assert secret not in shown


@FUZZ
@given(SECRET, PROSE)
def test_a_literal_secret_is_cut_wherever_it_is(secret: str, prose: str) -> None:
    assume(secret not in prose)
    text = f"{prose}{secret}{prose}\n{secret}"
    assert secret not in redact(text, [secret])
    assert redact(text, ["short"[:3]]) == redact(text)  # a 3-letter "secret" blanks nothing


def test_a_command_line_loses_every_credential_also_one_no_pattern_catches() -> None:
    argv = ["quantcheck", "collect", "--endpoint", "http://alice:pa ss%40word@h:1/v1",
            "--api-key", "Zq7-value", "--token=Zq7-other", "--api-key-env", "VAR",
            "--label", "fp8"]
    shown = redact_command(argv)
    assert shown == ("quantcheck collect --endpoint http://***@h:1/v1 --api-key *** "
                     "--token=*** --api-key-env VAR --label fp8")
    assert {"pa ss%40word", "pa ss@word"} <= set(command_secrets(argv))
    # the traceback quoting that URL loses it too, through the literal secrets
    assert "pa ss" not in redact("ValueError('http://alice:pa ss%40word@h:1/v1')",
                                 command_secrets(argv))


def test_the_environment_secrets_are_the_key_variables_values() -> None:
    found = environment_secrets({"OPENAI_API_KEY": "sk-abcdef", "HF_TOKEN": "hf_abcdef",
                                 "PATH": "/usr/bin:/bin", "DB_PASSWORD": "hunter22",
                                 "SHORT_KEY": "1"})
    assert sorted(found) == ["hf_abcdef", "hunter22", "sk-abcdef"]


@pytest.mark.parametrize(("name", "secret"), [
    ("api_key", True), ("api-key", True), ("token", True), ("X-Amz-Signature", True),
    ("client_secret", True), ("key", True), ("access_token", True), ("max_tokens", False),
    ("api_key_env", False), ("api-key-env", False), ("sort_keys", False), ("page", False),
    ("monkey", False), ("session_id", False)])
def test_secret_names(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


@pytest.mark.parametrize("text", ["a" * 400_000, "x?" * 150_000, "http:" * 100_000,
                                  'a="' * 60_000, "bearer " * 60_000, "http://" + "a@" * 60_000,
                                  "--" + "a" * 300_000, ("&" + "a" * 1000) * 300])
def test_a_long_text_takes_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 5
