"""store/redaction.py, property-based: any URL holding a user, a password, a key in
its query, fragment or path, any credential header, bearer token, Basic credentials in
Base64, `--api-key`-like option or key-shaped string, wherever it sits in a text,
comes out without the secret, as does every form a URL's password is sent in; text
holding none (a normal API path, a model's name, a word after "Bearer") comes out
unchanged; and no text costs more than linear time."""

from __future__ import annotations

import base64
import os
import string
import time
from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from quantcheck.store.redaction import (
    REDACTED,
    SECRET_WORDS,
    basic_token,
    command_secrets,
    environment_secrets,
    key_like,
    password_forms,
    public_url,
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
                                  "--" + "a" * 300_000, ("&" + "a" * 1000) * 300,
                                  "a." * 200_000, "http://h/" + "a/" * 200_000,
                                  "Basic " + "QUJD" * 100_000, "basic " * 60_000,
                                  "http://h/" + "Ab1" * 100_000])
def test_a_long_text_takes_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 5


# --- keys in a URL's path, query and fragment ------------------------------------------

# A random token, as a gateway puts a key in its path: a long run of letters and digits.
TOKEN = st.text(string.ascii_letters + string.digits, min_size=17, max_size=40
                ).map(lambda tail: "Zq7" + tail)
KEY = st.one_of(TOKEN, TOKEN.map(lambda t: f"sk-proj-{t}"), TOKEN.map(lambda t: f"hf_{t}"),
                st.text("0123456789abcdef", min_size=32, max_size=40).map(lambda t: "7a" + t))
# Paths and names a normal endpoint has: words, versions, dates, UUIDs, short ids.
NAME = st.sampled_from(["v1", "api", "openai", "deployments", "gpt-4o-mini-2024-07-18",
                        "Meta-Llama-3.1-8B-Instruct", "Qwen2.5-72B-Instruct-AWQ", "v2",
                        "vllm-abc123xyz456", "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                        "production", "sync", "models", "gemma-3-270m-it-qat-Q4_K_M",
                        "proxy", "inference", "llama3.1:8b", "2024-02-15-preview"])


@FUZZ
@given(st.lists(NAME, max_size=3), KEY, st.lists(NAME, max_size=3), HOST, PORT, CONTEXTS,
       PROSE, PROSE)
def test_a_key_in_a_urls_path_is_cut_in_any_context(
        before_key: list[str], key: str, after_key: list[str], host: str, port: str,
        context: str, before: str, after: str) -> None:
    path = "/".join(["", *before_key, key, *after_key])
    url = f"https://{host}{port}{path}"
    shown = redact(f"{before} {context.format(url)} {after}")
    assert key not in shown and REDACTED in shown, shown
    assert before in shown and after in shown
    for name in before_key + after_key:
        assert f"/{name}" in shown  # the rest of the path stays


@FUZZ
@given(st.lists(NAME, min_size=1, max_size=5), HOST, PORT, CONTEXTS, PROSE)
def test_a_normal_path_comes_back_unchanged(names: list[str], host: str, port: str,
                                            context: str, prose: str) -> None:
    text = f"{prose} {context.format(f'http://{host}{port}/' + '/'.join(names))} {prose}"
    assert redact(text) == text
    assert not any(key_like(name) for name in names)


@FUZZ
@given(PLAIN_PARAMS, KEY, st.sampled_from(["?", "#", "&"]), HOST)
def test_a_key_shaped_value_in_a_query_or_fragment_is_cut_whatever_its_name(
        name: str, key: str, lead: str, host: str) -> None:
    url = f"https://{host}/v1{lead if lead != '&' else '?page=2&'}{name}={key}"
    shown = redact(f"see {url} now")
    assert key not in shown and shown.endswith(f"{name}={REDACTED} now")


# --- Basic credentials and the forms a password is sent in ----------------------------

USER = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
# A password as a URL holds it: any text, percent-encoded (spaces, ':', '@', non-ASCII).
PLAIN_PASSWORD = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=4,
                         max_size=20).map(lambda tail: "Zq7" + tail)


@FUZZ
@given(USER, PLAIN_PASSWORD, st.sampled_from(["std", "url-safe", "unpadded"]),
       st.sampled_from(["Basic {}", "basic {}", "BASIC {}", "auth scheme Basic {} refused",
                        "'Basic {}'", '{{"auth": "Basic {}"}}']), PROSE)
def test_basic_credentials_in_base64_are_cut_anywhere(
        user: str, password: str, form: str, context: str, prose: str) -> None:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    if form != "std":
        token = token.replace("+", "-").replace("/", "_")
    if form == "unpadded":
        token = token.rstrip("=")
    shown = redact(f"{prose} {context.format(token)} {prose}")
    assert token not in shown and token.rstrip("=") not in shown, shown


@FUZZ
@given(USER, PLAIN_PASSWORD, PROSE)
def test_every_form_a_urls_password_is_sent_in_is_cut(user: str, password: str,
                                                      prose: str) -> None:
    userinfo = f"{user}:{quote(password, safe='')}"
    forms = password_forms(userinfo)
    token = basic_token(userinfo)
    assert base64.b64decode(token).decode() == f"{user}:{password}"
    assert {password, token, token.replace("+", "-").replace("/", "_")} <= set(forms)
    for form in forms:  # quoted bare, without "Basic" or a name before it
        shown = redact(f"{prose} got {form} {prose}", forms)
        assert form not in shown and password not in shown, (form, shown)


@pytest.mark.parametrize("text", ["Bearer authentication failed", "Bearer Token required",
                                  "use a Bearer token", "Basic authentication required",
                                  "HTTP Basic realm=\"api\"", "Basic Usage of the API",
                                  "bearer TOKEN expected"])
def test_a_word_after_bearer_or_basic_stays(text: str) -> None:
    assert redact(text) == text


def test_a_command_lines_url_gives_its_password_forms_and_path_keys_as_secrets() -> None:
    argv = ["quantcheck", "run", "--a", "http://u:pa%3Asswd@h/AbCd1234EfGh5678IjKl90/v1"]
    secrets = command_secrets(argv)
    assert {"pa:sswd", "AbCd1234EfGh5678IjKl90", basic_token("u:pa%3Asswd")} <= set(secrets)
    assert redact_command(argv) == "quantcheck run --a http://***@h/***/v1"


def test_public_url_keeps_an_ipv6_hosts_brackets_and_drops_credentials() -> None:
    assert public_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert public_url("https://user:secret@[2001:db8::1]/v1?key=x") == \
        "https://[2001:db8::1]/v1"
    assert public_url("http://user:secret@Example.com:8000/v1") == "http://example.com:8000/v1"
    assert public_url("http://host:abc/v1") == "http://?"  # nothing of it is shown


@pytest.mark.parametrize(("endpoint", "shown"), [
    ("http://h:1/sk-proj-abcdefghijklmnop1234/v1", "http://h:1/***/v1"),
    ("http://h:1/AbCd1234EfGh5678IjKl90wxyz/v1", "http://h:1/***/v1"),
    ("https://h/gw/0123456789abcdef0123456789abcdef/openai", "https://h/gw/***/openai"),
    ("http://h:1/v1", "http://h:1/v1"),
    ("https://h/openai/deployments/gpt-4o-mini-2024-07-18/v1",
     "https://h/openai/deployments/gpt-4o-mini-2024-07-18/v1"),
    ("https://h/v2/vllm-abc123xyz456/openai/v1", "https://h/v2/vllm-abc123xyz456/openai/v1"),
    ("https://h/run/3fa85f64-5717-4562-b3fc-2c963f66afa6/v1",
     "https://h/run/3fa85f64-5717-4562-b3fc-2c963f66afa6/v1"),
    ("https://h/models/Meta-Llama-3.1-8B-Instruct/v1",
     "https://h/models/Meta-Llama-3.1-8B-Instruct/v1"),
], ids=["sk-key", "token", "hex-id", "v1", "azure", "runpod", "uuid", "model"])
def test_public_url_cuts_a_key_in_the_path_and_keeps_a_normal_path(
        endpoint: str, shown: str) -> None:
    assert public_url(endpoint) == shown
