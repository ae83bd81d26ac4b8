"""Chat templates, read offline: the turn markers of the common template families,
which of them a rendered prompt or an answer holds, whether an answer echoes its
question, a rendering's identity (for the serving cell), and the runtimes' known
fallback templates.

A model served with a template it was not trained on sees the template's markers as
plain text: its answers then often repeat the question and go on with a marker and a
new turn (`<|im_end|>\\n<|im_start|>user\\n...`). The preflight's `template` check
looks at what the server renders; the comparison counts the answers that show it.
"""

from __future__ import annotations

import hashlib
import re

from ..store.records.preflight_records import Check, TemplateRendering

MARKERS: dict[str, tuple[str, ...]] = {
    "ChatML": ("<|im_start|>", "<|im_end|>"),
    "Gemma": ("<start_of_turn>", "<end_of_turn>"),
    "Llama 2 / Mistral": ("[INST]", "[/INST]"),
    "Llama 3": ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"),
    "Phi / Zephyr": ("<|user|>", "<|assistant|>", "<|system|>", "<|end|>"),
    "DeepSeek": ("<｜User｜>", "<｜Assistant｜>"),
}
_MARKER = re.compile("|".join(re.escape(m) for family in MARKERS.values() for m in family))
# Templates a runtime uses when the model carries none, whitespace left out.
FALLBACKS = {
    "llama.cpp's ChatML fallback (the model file carries no chat template)": re.sub(
        r"\s", "", "{%- for message in messages -%}{{- '<|im_start|>' + message.role + "
        "'\n' + message.content + '<|im_end|>\n' -}}{%- endfor -%}{%- if "
        "add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"),
}
_BOS = ("<bos>", "<s>", "<|begin_of_text|>", "<|startoftext|>")
ECHO_LEAST_CHARS = 16  # a shorter question repeated in an answer proves nothing
_SPACE = re.compile(r"\s+")


def markers_in(text: str) -> list[str]:
    """The template markers a text holds, each once, in the order they first appear."""
    return list(dict.fromkeys(_MARKER.findall(text)))


def known_fallback(template: str | None) -> str | None:
    """The name of the runtime fallback this template is, or None."""
    if not template:
        return None
    bare = re.sub(r"\s", "", template)
    return next((name for name, fallback in FALLBACKS.items() if bare == fallback), None)


def rendering_key(text: str | None, ids: list[int] | None) -> str | None:
    """A short identity of how a server renders the fixed conversation: of its text
    (a leading BOS left out: runtimes differ in whether they show it), else its ids."""
    if text is not None:
        for bos in _BOS:
            text = text.removeprefix(bos)
        data = text.encode("utf-8", "surrogatepass")
    elif ids:
        data = ",".join(map(str, ids)).encode()
    else:
        return None
    return hashlib.sha256(data).hexdigest()[:12]


def template_signs(question: str | None, answer: str) -> str:
    """What an answer shows of a template the model does not know, comma-separated:
    `echo` (it repeats the question: chat prompts only, `question` given) and
    `markers` (it carries template markers)."""
    signs = []
    if question is not None and echoes_question(question, answer):
        signs.append("echo")
    if _MARKER.search(answer):
        signs.append("markers")
    return ",".join(signs)


def echoes_question(question: str, answer: str) -> bool:
    """Whether the answer repeats the question (words and case aside from spacing)."""
    asked = _SPACE.sub(" ", question).strip().lower()
    return len(asked) >= ECHO_LEAST_CHARS and asked in _SPACE.sub(" ", answer).lower()


def template_agreement(a: TemplateRendering | None, b: TemplateRendering | None) -> Check:
    """Whether A and B render the same conversation alike (a difference is a confound:
    the serving cell's `chat_template` axis)."""
    keys = [rendering_key(side.text, side.ids) if side else None for side in (a, b)]
    if a is None or b is None or None in keys:
        return Check("template", "skip", "the conversation was not rendered on both sides")
    if keys[0] == keys[1]:
        return Check("template", "pass", "A and B render the conversation alike")
    return Check("template", "warn", "A and B render the same conversation differently (a "
                 f"confound: the chat template): A {_shown(a)}, B {_shown(b)}",
                 "serve both with the same chat template")


def _shown(rendering: TemplateRendering) -> str:
    return repr(rendering.text[:120]) if rendering.text is not None else \
        f"{len(rendering.ids or [])} token ids"


def last_user_message(request: dict[str, object]) -> str | None:
    """The text of a chat request's last user message (what an echo repeats)."""
    messages = request.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None
