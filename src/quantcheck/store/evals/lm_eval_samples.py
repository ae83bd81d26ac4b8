"""One line of an lm-evaluation-harness samples file as an eval sample (the rules are
store/evals/lm_eval_logs.py's docstring): a generating task's prompt, answer and filtered
answer; a multiple-choice task's chosen continuation and its choices' margin; any
other loglikelihood task's scored continuation."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import orjson

from ..records.run_records import Tokens
from .eval_records import (
    EvalSample,
    list_at,
    log_error,
    mapping_at,
    score_value,
    shown,
    text_at,
)


@dataclass(frozen=True)
class SampleShape:
    """What reading a task's line needs of the task: its name, its output type, the
    delimiter before a continuation, and its verdict metric."""

    task: str
    output_type: str
    delimiter: str
    metric: str | None


def sample_of(task: SampleShape, line: dict[str, object], where: str, doc: str
              ) -> EvalSample:
    """The sample of document `doc` (its scores are the reader's to add)."""
    arguments = _arguments(line, where)
    if task.output_type == "multiple_choice" and len(arguments) > 0:
        return _choice_sample(task, line, where, doc, arguments)
    context, extra = arguments[0] if arguments else ("", None)
    api, request = _request(context, extra)
    sample = EvalSample(task=task.task, sample_id=doc, request=request, api=api,
                        where=where, target=shown(line.get("target", "")),
                        document=_document(line))
    if task.output_type == "generate_until":
        sample.text = _first_response(line, where)
        sample.answer = _filtered_text(line.get("filtered_resps"))
    else:  # loglikelihood, loglikelihood_rolling: what was scored, and its score
        sample.text = extra if isinstance(extra, str) else ""
        likelihoods = _likelihoods(line, where)
        if likelihoods and sample.text:
            sample.tokens = Tokens([sample.text], [likelihoods[0]], [[sample.text]],
                                   [[likelihoods[0]]])
    return sample


def _arguments(line: dict[str, object], where: str) -> list[tuple[str, object]]:
    """Each request's context and second argument (a generation's settings, or the
    continuation scored), in order."""
    given = line.get("arguments")
    if isinstance(given, list):
        raise log_error(where, "`arguments` is a list: a log written before lm-eval 0.4.3",
                        "rerun the eval with lm-eval 0.4.3 or later")
    requests = mapping_at(given, where, "arguments")
    found = []
    for n in range(len(requests)):
        request = mapping_at(requests.get(f"gen_args_{n}"), where, f"arguments.gen_args_{n}")
        found.append((text_at(request.get("arg_0"), where, f"arguments.gen_args_{n}.arg_0"),
                      request.get("arg_1")))
    return found


def _request(context: str, extra: object) -> tuple[str, dict[str, object]]:
    """The request as quantcheck keeps it: a chat's messages when the context is their
    JSON (lm-eval's chat template, sent as messages), else the prompt."""
    request: dict[str, object] = {"prompt": context}
    api = "completions"
    if context.startswith("[{"):
        try:
            messages = orjson.loads(context)
        except orjson.JSONDecodeError:
            messages = None
        if isinstance(messages, list) and all(isinstance(m, dict) and "role" in m
                                              for m in messages):
            request, api = {"messages": messages}, "chat"
    if isinstance(extra, dict):
        tokens = extra.get("max_gen_toks", extra.get("max_tokens"))
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            request["max_tokens"] = tokens
        until = extra.get("until")
        if isinstance(until, list) and all(isinstance(s, str) for s in until) and until:
            request["stop"] = until
    return api, request


def _first_response(line: dict[str, object], where: str) -> str:
    responses = list_at(line.get("resps"), where, "resps")
    first = responses[0] if responses else []
    first = first[0] if isinstance(first, list) and first else first
    return first if isinstance(first, str) else shown(first) if first else ""


def _filtered_text(value: object) -> str | None:
    if isinstance(value, list) and value:
        value = value[0]
    return None if value is None else shown(value)


def _document(line: dict[str, object]) -> str | None:
    digest = line.get("doc_hash")
    if isinstance(digest, str) and digest:
        return digest
    if "doc" not in line:
        return None
    text = shown(line.get("doc"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _likelihoods(line: dict[str, object], where: str) -> list[float]:
    """Each request's log-likelihood: the first number of each filtered response (a
    [LOGLIKELIHOOD, IS_GREEDY] pair, numbers written as text since 0.4.3)."""
    found = []
    for response in list_at(line.get("filtered_resps", line.get("resps")), where,
                            "filtered_resps"):
        first = response
        while isinstance(first, list) and first:
            first = first[0]
        number = _number(first)
        if number is None:
            raise log_error(where, f"`filtered_resps` holds {shown(response)[:60]}, not a "
                            "log-likelihood")
        found.append(number)
    return found


def _number(value: object) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    number = score_value(value)
    return number if number is not None and not isinstance(value, bool) else None


def _choice_sample(task: SampleShape, line: dict[str, object], where: str, doc: str,
                   arguments: list[tuple[str, object]]) -> EvalSample:
    """A multiple-choice document: the chosen continuation, the choices as the one
    position's alternatives."""
    choices = [extra if isinstance(extra, str) else shown(extra) for _, extra in arguments]
    likelihoods = _likelihoods(line, where)
    if len(likelihoods) != len(choices):
        raise log_error(where, f"{len(choices)} choices but {len(likelihoods)} "
                        "log-likelihoods in `filtered_resps`")
    per_character = (task.metric or "").startswith("acc_norm")
    deciding = [value / max(1, len(_bare(choice, task.delimiter))) if per_character else value
                for value, choice in zip(likelihoods, choices, strict=True)]
    chosen = deciding.index(max(deciding))
    normalized = _normalized(deciding)
    ranked = sorted(range(len(choices)), key=lambda n: -deciding[n])
    sample = EvalSample(task=task.task, sample_id=doc, request={"prompt": arguments[0][0]},
                        api="completions", where=where, text=choices[chosen],
                        target=_choice_target(line.get("target"), choices, task.delimiter),
                        answer=_bare(choices[chosen], task.delimiter), document=_document(line))
    sample.tokens = Tokens([choices[chosen]], [normalized[chosen]],
                           [[choices[n] for n in ranked]], [[normalized[n] for n in ranked]])
    return sample


def _bare(choice: str, delimiter: str) -> str:
    return choice[len(delimiter):] if delimiter and choice.startswith(delimiter) else choice


def _normalized(values: list[float]) -> list[float]:
    """Log-probabilities over the choices (a log-softmax): their differences kept."""
    top = max(values)
    total = top + math.log(math.fsum(math.exp(v - top) for v in values))
    return [v - total for v in values]


def _choice_target(target: object, choices: list[str], delimiter: str) -> str:
    index = target
    if isinstance(target, str) and target.isdigit():
        index = int(target)
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(choices):
        return _bare(choices[index], delimiter)
    return shown(target)
