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
- a bearer token anywhere: `Bearer abc123` -> `Bearer ***`;
- an option's value whose name says it is a credential (`--api-key VALUE`,
  `--token=VALUE`, `--password`; `--api-key-env VAR` names a variable, and is kept);
- a quoted value of such a name in a Python or JSON mapping (`'api_key': 'abc'`,
  `password="abc"`);
- keys by their well-known shapes (`sk-...`, `hf_...`, `ghp_...`, `github_pat_...`);
- and every literal string passed as `secrets` (the API key a client holds, the values
  of the environment's key variables), when it is at least MIN_SECRET characters long.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import unquote

REDACTED = "***"
MIN_SECRET = 6  # a shorter "secret" (a flag's "1") would blank ordinary text
# Words that make a name a credential's: `api_key`, `X-Amz-Signature`, `client_secret`.
SECRET_WORDS = ("token", "key", "apikey", "secret", "password", "passwd", "pwd", "sig",
                "signature", "auth", "credential", "credentials", "session", "cookie")
# ...unless the name ends in one of these: it then names where a secret is, not the secret.
NOT_SECRET_ENDINGS = ("env", "file", "path", "var", "name", "id", "hint", "header")
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/?#@]*(?:@[^\s/?#@]*)*)@")
_SCHEME = re.compile(r"(?i)^[a-z][a-z0-9+.\-]*://")
_QUERY = re.compile(r"([?&;])([^\s=&#;?'\"]+)=([^\s&#;'\"<>]*)")
_HEADER = re.compile(
    r"(?i)\b(proxy-authorization|authorization|x-api-key|api-key|x-auth-token|cookie)"
    r"(['\"]?\s*[:=]\s*['\"]?)((?:bearer|basic|token|digest)\s+)?([^\s'\",}]+)")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/\-]{6,}=*)")
_OPTION = re.compile(r"(--[A-Za-z0-9][\w\-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)")
# a name starts where a word does: tried inside a word, a long one costs its square
_QUOTED = re.compile(r"(['\"]?)(?<![\w\-])([A-Za-z_][\w\-]*)\1(\s*[:=]\s*)(['\"])(.*?)\4")
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
    text = _QUERY.sub(_query_parameter, text)
    text = _HEADER.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + REDACTED,
                       text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _OPTION.sub(_option_value, text)
    text = _QUOTED.sub(_quoted_value, text)
    return _SHAPES.sub(REDACTED, text)


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
                                                    for part in (piece, unquote(piece)))]
    return [secret for secret in found if len(secret) >= MIN_SECRET]


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment's variables whose names say they hold a credential
    (`OPENAI_API_KEY`, `HF_TOKEN`, `GITHUB_TOKEN`, `*_PASSWORD`): literal strings to cut."""
    environ = os.environ if environ is None else environ
    return [value for name, value in environ.items()
            if SECRET_ENV.search(name) and len(value) >= MIN_SECRET]


def _query_parameter(match: re.Match[str]) -> str:
    lead, name, value = match.groups()
    if not value or not secret_name(name):
        return match.group(0)
    return f"{lead}{name}={REDACTED}"


def _option_value(match: re.Match[str]) -> str:
    option, between, value = match.groups()
    if not secret_name(option[2:]) or value.startswith("-"):
        return match.group(0)
    return f"{option}{between}{REDACTED}"


def _quoted_value(match: re.Match[str]) -> str:
    quote, name, between, value_quote, value = match.groups()
    if not value or value == REDACTED or not secret_name(name):
        return match.group(0)
    return f"{quote}{name}{quote}{between}{value_quote}{REDACTED}{value_quote}"
