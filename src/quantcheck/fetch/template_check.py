"""The preflight's `template` check (chat API only): how the server turns a fixed
conversation into a prompt, asked the way each runtime offers it, and whether that
prompt carries template markers the model does not know.

- llama.cpp's llama-server: `POST /apply-template` (the rendered text), and `/props`'
  `chat_template` (is it the runtime's own fallback?);
- vLLM and SGLang: `POST /tokenize` with `messages` (the rendered prompt's token ids),
  then `POST /detokenize` with special tokens kept (its text);
- an engine whose profile renders no template on request (llama-cpp-python renders in
  Python): skipped; answers are still scanned for leaked markers when compared; a
  server that does not say what it is: each way is tried.

A marker the rendered prompt holds is tokenized alone with the runtime's tokenize
endpoint: a model that knows the template has each marker as one token; split into
several ordinary pieces (`<|im_start|>` as 6 tokens on Gemma), it reads as plain text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..store.engines import APPLY_TEMPLATE, TOKENIZE_MESSAGES, profile_of, tokenizers_first
from ..store.folders.run_dir import ServerInfo
from ..store.records.preflight_records import Check, TemplateRendering
from ..store.runtimes import mapping
from ..triage.templates import known_fallback, markers_in, rendering_key
from ..wire.client import TRANSPORT_ERRORS, EndpointClient, HTTPStatusError, server_root
from ..wire.dialects import MalformedResponse

CONVERSATION = [{"role": "user", "content": "What is the capital of France?"}]
FIX = ("start the server with the model's own chat template (llama-server: "
       "--chat-template-file FILE, or --jinja with a GGUF that carries one; vLLM and "
       "SGLang: --chat-template FILE)")
_UNANSWERED = (HTTPStatusError, MalformedResponse, KeyError, TypeError, ValueError,
               *TRANSPORT_ERRORS)


async def template_check(client: EndpointClient, model: str, server: ServerInfo, api: str
                         ) -> tuple[Check, TemplateRendering | None]:
    if api != "chat":
        return Check("template", "skip", "completions API: no chat template"), None
    rendering = await _render(client, model, server)
    if rendering is None:
        return Check("template", "skip", "the server renders no conversation on request "
                     "(answers are still checked for template markers)"), None
    rendering.split_markers = await _split_markers(client, model, server.runtime,
                                                   rendering.text or "")
    return _verdict(rendering), rendering


def _verdict(rendering: TemplateRendering) -> Check:
    shown = repr(rendering.text[:80]) if rendering.text is not None else \
        f"of {len(rendering.ids or [])} token ids"
    fallback = f"; it is {rendering.fallback}" if rendering.fallback else ""
    if rendering.text is not None and CONVERSATION[0]["content"] not in rendering.text:
        return Check("template", "warn", f"the rendered prompt {shown} does not hold the "
                     "conversation's message: the template drops what the user wrote", FIX)
    if rendering.split_markers:
        split = ", ".join(f"{marker} ({pieces} tokens)"
                          for marker, pieces in rendering.split_markers.items())
        return Check("template", "warn", f"the rendered prompt {shown} holds template "
                     f"markers the model's tokenizer splits into ordinary pieces: {split}: "
                     f"the model does not know this template{fallback}", FIX)
    return Check("template", "pass", f"rendered by {rendering.method}: {shown}{fallback}")


async def _render(client: EndpointClient, model: str, server: ServerInfo
                  ) -> TemplateRendering | None:
    """The conversation as the server renders it, by the runtime's own way first."""
    profile = profile_of(server.runtime)
    if profile is not None and profile.chat_template is None:
        return None
    own = profile.chat_template if profile else APPLY_TEMPLATE
    ways = sorted(_WAYS, key=lambda name: name != own)
    for name in ways:
        way = _WAYS[name]
        try:
            found = await way(client, model, server)
        except _UNANSWERED:
            continue
        if found is not None:
            return found
    return None


async def _llama_cpp(client: EndpointClient, model: str, server: ServerInfo
                     ) -> TemplateRendering | None:
    answer = await client.post_json(server_root(client.endpoint) + "/apply-template",
                                    {"messages": CONVERSATION})
    text = answer["prompt"]
    if not isinstance(text, str) or not text:
        return None
    template = mapping(server.props).get("chat_template")
    return TemplateRendering(method="llama.cpp /apply-template", text=text,
                             fallback=known_fallback(template if isinstance(template, str)
                                                     else None))


async def _vllm_or_sglang(client: EndpointClient, model: str, server: ServerInfo
                          ) -> TemplateRendering | None:
    root = server_root(client.endpoint)
    answer = await client.post_json(root + "/tokenize", {
        "model": model, "messages": CONVERSATION, "add_generation_prompt": True})
    ids = [int(token) for token in answer["tokens"]]
    if not ids:
        return None
    text: str | None = None
    try:
        decoded = await client.post_json(root + "/detokenize", {
            "model": model, "tokens": ids, "skip_special_tokens": False})
        shown = mapping(decoded)  # a list, a string or null holds no text
        found = shown.get("prompt", shown.get("text"))  # vLLM's field, SGLang's
        text = found if isinstance(found, str) else None
    except _UNANSWERED:
        pass
    profile = profile_of(server.runtime)
    runtime = server.runtime if profile else "vLLM or SGLang"
    return TemplateRendering(method=f"{runtime} /tokenize with messages", text=text, ids=ids)


async def _split_markers(client: EndpointClient, model: str, runtime: str, text: str
                         ) -> dict[str, int]:
    """Each marker of the rendered text that the tokenizer splits: marker -> pieces."""
    endpoints = tokenizers_first(runtime)
    split: dict[str, int] = {}
    for marker in markers_in(text):
        for _, endpoint in endpoints:
            path = endpoint.path
            body: dict[str, object] = {endpoint.text_field: marker, **(
                {"model": model, "add_special_tokens": False} if endpoint.wants_model else {})}
            try:
                answer = await client.post_json(server_root(client.endpoint) + path, body)
                pieces = len(answer["tokens"])
            except _UNANSWERED:
                continue
            if pieces > 1:
                split[marker] = pieces
            if pieces:
                break
    return split


_Way = Callable[[EndpointClient, str, ServerInfo], Awaitable[TemplateRendering | None]]
_WAYS: dict[str, _Way] = {APPLY_TEMPLATE: _llama_cpp, TOKENIZE_MESSAGES: _vllm_or_sglang}


def rendering_cell_value(rendering: TemplateRendering | None) -> str | None:
    """The serving cell's `chat_template`: the rendering's identity."""
    return rendering_key(rendering.text, rendering.ids) if rendering else None
