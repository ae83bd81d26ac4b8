"""Credentials cut out of text before it is shown or saved: what a crash file, an error
line, a progress line and a failed record's reason hold is first passed through
`redact` (pure: text in, text out).

Each credential becomes `***`, whatever surrounds it is kept:
- a URL's user and password: `http://alice:pw@host/v1` -> `http://***@host/v1`;
- a query parameter that holds a credential, by its name (`token`, `api_key`, `key`,
  `access_token`, `secret`, `password`, `sig`, `signature`, `auth`, `credential`, and
  any name ending in one of them: `X-Amz-Signature`, `client_secret`):
  `?token=abc&page=2` -> `?token=***&page=2`;
- a header that carries one (`Authorization`, `Proxy-Authorization`, `X-Api-Key`,
  `Api-Key`, `X-Auth-Token`, `Cookie`), as a header line or a Python/JSON mapping:
  `Authorization: Bearer abc` -> `Authorization: Bearer ***`;
- a bearer token anywhere: `Bearer abc123` -> `Bearer ***` (a word that is no token
  stays: `Bearer authentication failed`);
- Basic credentials anywhere: `Basic dXNlcjpwYXNz` -> `Basic ***`, when the word after
  `Basic` is Base64 (standard or URL-safe) of `user:password`;
- an option's value whose name says it is a credential (`--api-key VALUE`,
  `--token=VALUE`, `--password`; `--api-key-env VAR` names a variable, and is kept);
- a quoted value of such a name in a Python or JSON mapping (`'api_key': 'abc'`,
  `password="abc"`);
- keys by their well-known shapes (`sk-...`, `hf_...`, `ghp_...`, `github_pat_...`);
- a URL's path segment, query value or fragment value that looks like a key
  (`key_like`: a well-known shape, or a random token: a run of at least 20 letters and
  digits holding both, or of at least 32 of either), whatever its name:
  `http://host/sk-abc.../v1` -> `http://host/***/v1`, while `/v1`,
  `/openai/deployments/gpt-4o-mini/v1` or a UUID stay;
- and every literal string passed as `secrets` (the API key a client holds, the values
  of the environment's key variables, the forms a URL's password may take:
  `password_forms`), when it is at least MIN_SECRET characters long.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, unquote, urlsplit, urlunsplit

REDACTED = "***"
MIN_SECRET = 6  # a shorter "secret" (a flag's "1") would blank ordinary text
# Words that make a name a credential's: `api_key`, `X-Amz-Signature`, `client_secret`.
SECRET_WORDS = ("token", "key", "apikey", "secret", "password", "passwd", "pwd", "sig",
                "signature", "auth", "credential", "credentials", "session", "cookie")
# ...unless the name ends in one of these: it then names where a secret is, not the secret.
NOT_SECRET_ENDINGS = ("env", "file", "path", "var", "name", "id", "hint", "header")
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)

# A scheme is short: unbounded, each of "a.a.a..." would be tried to the text's end.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^\s/?#@]*(?:@[^\s/?#@]*)*)@")
_SCHEME = re.compile(r"(?i)^[a-z][a-z0-9+.\-]*://")
_QUERY = re.compile(r"([?&;#])([^\s=&#;?'\"]+)=([^\s&#;'\"<>]*)")
_HEADER = re.compile(
    r"(?i)\b(proxy-authorization|authorization|x-api-key|api-key|x-auth-token|cookie)"
    r"(['\"]?\s*[:=]\s*['\"]?)((?:bearer|basic|token|digest)\s+)?([^\s'\",}]+)")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/\-]{6,}=*)")
_BASIC = re.compile(r"(?i)\b(basic)(\s+)([A-Za-z0-9+/_\-]{4,}={0,2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+")  # a word after "Bearer", no token
# A URL: its path, query and fragment end where text around it resumes.
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]{0,31}://[^\s'\"<>`]+")
_RUNS = re.compile(r"[A-Za-z0-9]+")
KEY_RUN, LONG_RUN = 20, 32  # a random token's letters and digits (key_like)
# a value never starts with "-": "--x --api-key KEY" is two options, not x's value
_OPTION = re.compile(r"(--[A-Za-z0-9][\w\-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|(?!-)\S+)")
# A name that holds a secret word, so that no other name's match swallows one
# (`x = "api_key": "..."`: x is no candidate, api_key is); it starts where a word does:
# tried inside a word, a long one costs its square.
_SECRET_PART = r"(?:token|key|secret|passw|pwd|sig|auth|credential|session|cookie)"
_QUOTED = re.compile(rf"(['\"]?)(?<![\w\-])((?i:(?=[A-Za-z_])[\w\-]*?{_SECRET_PART}[\w\-]*))"
                     r"\1(\s*[:=]\s*)(['\"])(.*?)\4")
_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                     r"|github_pat_[A-Za-z0-9_]{20,})")


class CredentialsIgnored(UserWarning):
    """The endpoint's URL holds a user and password and an API key is given too: the
    key is sent, the URL's user and password are not (wire.client warns; the CLI says
    it as one line)."""


def secret_name(name: str) -> bool:
    """Whether a parameter, option or field of this name holds a credential:
    `api_key`, `X-Amz-Signature`, `token` yes; `max_tokens`, `api_key_env`, `sort` no."""
    words = [word for word in re.split(r"[\W_]+", name.lower()) if word]
    if not words or words[-1] in NOT_SECRET_ENDINGS:
        return False
    return any(word in SECRET_WORDS or word.endswith(("token", "secret", "password"))
               for word in words) or name.lower().replace("-", "_") == "api_key"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every credential it carries replaced by `***` (the module's list);
    text that carries none comes back unchanged."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _URL.sub(lambda m: redact_url_path(m.group(0)), text)
    text = _QUERY.sub(_query_parameter, text)
    text = _HEADER.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + REDACTED,
                       text)
    text = _BEARER.sub(_bearer_token, text)
    text = _BASIC.sub(_basic_credentials, text)
    text = _OPTION.sub(_option_value, text)
    text = _QUOTED.sub(_quoted_value, text)
    return _SHAPES.sub(REDACTED, text)


def key_like(value: str) -> bool:
    """Whether a URL's path segment or parameter value looks like a credential (the
    module's rule): a key's well-known shape, or a random token."""
    value = unquote(value)
    if _SHAPES.search(value):
        return True
    return any(len(run) >= LONG_RUN or (len(run) >= KEY_RUN and not run.isalpha()
                                        and not run.isdigit())
               for run in _RUNS.findall(value))


def public_url(endpoint: str) -> str:
    """The endpoint without credentials, query string or fragment, and with each path
    segment that looks like a key cut (`http://host/sk-.../v1` -> `http://host/***/v1`;
    key_like): safe to write to a manifest (an IPv6 address keeps its
    brackets). A URL that cannot be split (the client's api_base refuses it) is shown as its scheme
    only, `http://?`: nothing else of it is known to be safe."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        return endpoint.split("://", 1)[0] + "://?"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if port:
        host = f"{host}:{port}"
    return redact_url_path(urlunsplit((parts.scheme, host, parts.path, "", "")))


def redact_url_path(url: str) -> str:
    """`url` with each path segment that looks like a key (`key_like`) cut:
    `http://host/sk-.../v1` -> `http://host/***/v1`."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    path_start = url.find("/", start)
    if path_start < 0:
        return url
    ends = [at for at in (url.find("?", start), url.find("#", start)) if at >= 0]
    if ends and min(ends) < path_start:  # a query or fragment before any path
        return url
    end = min(ends, default=len(url))
    segments = url[path_start:end].split("/")
    return url[:path_start] + "/".join(map(_path_segment, segments)) + url[end:]


def _path_segment(segment: str) -> str:
    """A segment, cut when it looks like a key; punctuation that ends a sentence or a
    bracket around the URL is kept."""
    if not key_like(segment):
        return segment
    kept = len(segment) - len(segment.rstrip(")]},.;:!"))
    return REDACTED + segment[len(segment) - kept:]


def url_secrets(url: str) -> list[str]:
    """The path segments of `url` that look like keys, as written and percent-decoded:
    literal strings to cut from what quotes them without the URL around them."""
    scheme = _SCHEME.match(url)
    path = re.split(r"[?#]", url[scheme.end() if scheme else 0:], maxsplit=1)[0]
    found = [segment for segment in path.split("/")[1:] if key_like(segment)]
    return [form for segment in found for form in dict.fromkeys((segment, unquote(segment)))]


def basic_token(userinfo: str) -> str:
    """The Basic credentials of a URL's `user:password` as an Authorization header
    sends them: Base64 of both percent-decoded (UTF-8), as curl sends them."""
    user, _, password = userinfo.partition(":")
    pair = f"{unquote(user)}:{unquote(password)}".encode()
    return base64.b64encode(pair).decode("ascii")


def password_forms(userinfo: str) -> list[str]:
    """Every form in which a server or proxy may quote a URL's password back: the
    password and `user:password` as written and percent-decoded, percent-encoded
    again, JSON-escaped, and the Basic credentials in Base64 (standard and URL-safe,
    with and without padding). None for a URL without a password: its user alone is no
    secret."""
    password = userinfo.partition(":")[2]
    if not password:
        return []
    decoded = unquote(password)
    token = basic_token(userinfo)
    url_safe = token.replace("+", "-").replace("/", "_")
    forms = [userinfo, unquote(userinfo), password, decoded, quote(decoded, safe=""),
             json.dumps(decoded)[1:-1], token, token.rstrip("="), url_safe,
             url_safe.rstrip("=")]
    return [form for form in dict.fromkeys(forms) if len(form) >= MIN_SECRET]


def redact_command(argv: Sequence[str], secrets: Iterable[str] = ()) -> str:
    """A command line, each argument redacted on its own, and
    the value after an option whose name says it is a credential (`--api-key VALUE`)."""
    secrets = [*secrets, *command_secrets(argv)]
    shown: list[str] = []
    for argument in argv:
        option = argument.split("=", 1)[0]
        if shown and shown[-1].startswith("--") and "=" not in shown[-1] \
                and secret_name(shown[-1][2:]) and not argument.startswith("-"):
            shown.append(REDACTED)
        elif option.startswith("--") and "=" in argument and secret_name(option[2:]):
            shown.append(f"{option}={REDACTED}")
        else:
            shown.append(redact(argument, secrets))
    return " ".join(shown)


def command_secrets(argv: Sequence[str]) -> list[str]:
    """The user and password of every argument that is a URL (`http://alice:pw@host`),
    as written and percent-decoded, also when they hold what a URL may not (a space):
    literal strings to cut from whatever quotes that URL."""
    found: list[str] = []
    for argument in argv:
        scheme = _SCHEME.match(argument)
        if not scheme:
            continue
        authority = re.split(r"[/?#]", argument[scheme.end():], maxsplit=1)[0]
        userinfo = authority.rpartition("@")[0]
        if userinfo:
            found += [userinfo, unquote(userinfo), *(part for piece in userinfo.split(":")
                                                    for part in (piece, unquote(piece))),
                      *password_forms(userinfo)]
        found += url_secrets(argument)
    return [secret for secret in dict.fromkeys(found) if len(secret) >= MIN_SECRET]


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment's variables whose names say they hold a credential
    (`OPENAI_API_KEY`, `HF_TOKEN`, `GITHUB_TOKEN`, `*_PASSWORD`): literal strings to cut."""
    environ = os.environ if environ is None else environ
    return [value for name, value in environ.items()
            if SECRET_ENV.search(name) and len(value) >= MIN_SECRET]


def _query_parameter(match: re.Match[str]) -> str:
    lead, name, value = match.groups()
    if not value or not (secret_name(name) or key_like(value)):
        return match.group(0)
    return f"{lead}{name}={REDACTED}"


def _bearer_token(match: re.Match[str]) -> str:
    scheme, space, token = match.groups()
    if _WORD.fullmatch(token):  # "Bearer authentication failed": a word, no token
        return match.group(0)
    return scheme + space + REDACTED


def _basic_credentials(match: re.Match[str]) -> str:
    """`Basic TOKEN` with TOKEN cut when it is Base64 of `user:password`."""
    scheme, space, token = match.groups()
    padded = token.rstrip("=") + "=" * (-len(token.rstrip("=")) % 4)
    for alphabet in (None, b"-_"):
        try:
            pair = base64.b64decode(padded, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
        try:
            text = pair.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if ":" in text and not _CONTROL.search(text):  # user:password, not a word's bytes
            return scheme + space + REDACTED
    return match.group(0)


def _option_value(match: re.Match[str]) -> str:
    option, between, value = match.groups()
    if not secret_name(option[2:]):
        return match.group(0)
    return f"{option}{between}{REDACTED}"


def _quoted_value(match: re.Match[str]) -> str:
    quote, name, between, value_quote, value = match.groups()
    if not value or value == REDACTED or not secret_name(name):
        return match.group(0)
    return f"{quote}{name}{quote}{between}{value_quote}{REDACTED}{value_quote}"
