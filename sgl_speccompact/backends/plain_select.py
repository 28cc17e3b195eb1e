"""sglang's plain two-request ``select``, reading the scheduler's ``None`` first entry correctly.

``RuntimeEndpoint.select`` of sglang 0.5.23 sends a prefill of the prompt,
then one batch of ``prompt + choice`` with ``logprob_start_len = prompt_len - 2``
and reads ``input_token_logprobs``.  The scheduler pads the first entry of
those logprobs with ``None`` (``[None] + input_token_logprobs[:-1]`` in
``scheduler_components/logprob_result_processor.py``).  When the first
entry's token text ends the prompt, sglang's token-healing step subtracts
that ``None`` from a float and the select fails with ``TypeError``.  It
happens whenever the last two prompt tokens are the same text, e.g. a
tokenizer that splits the ``"\\n\\n"`` after an empty think block into two
``"\\n"`` tokens.

:func:`plain_select` sends exactly sglang's requests and drops the healed
entry by recomputing the mean over the entries that remain, which is what
sglang's formula computes when every value is present.
"""

from __future__ import annotations

from sglang.lang.choices import ChoicesDecision, ChoicesSamplingMethod

from ..errors import ConfigError


def mean_logprob(entries: list) -> float:
    """Mean of the logprobs present in ``(logprob, id, text)`` entries (0.0 if none).

    >>> mean_logprob([(None, 1, "a"), (-1.0, 2, "b"), (-3.0, 3, "c")]), mean_logprob([(None, 1, "a")])
    (-2.0, 0.0)
    """
    values = [e[0] for e in entries if e[0] is not None]
    return sum(values) / len(values) if values else 0.0


def heal(prompt: str, entries: list) -> list:
    """The entries without the first one when its token text ends ``prompt`` (sglang's token healing).

    >>> heal("a\\n\\n", [(None, 5, "\\n"), (-0.1, 5, "\\n"), (-0.2, 9, "pos")])
    [(-0.1, 5, '\\n'), (-0.2, 9, 'pos')]
    >>> heal("a\\n", [(None, 7, "a"), (-0.1, 5, "\\n")])
    [(None, 7, 'a'), (-0.1, 5, '\\n')]
    """
    text = entries[0][-1] if entries else None
    return entries[1:] if text and prompt.endswith(text) else entries


def choice_entries(endpoint, s, choices: list[str]) -> tuple[list[list], list[list]]:
    """sglang's two select requests: a prefill of the prompt, then ``prompt + choice`` for every
    choice; returns each choice's healed ``input_token_logprobs`` and its ``output_token_logprobs``."""
    obj = endpoint._generate_http_request(s, {"text": s.text_, "sampling_params": {"max_new_tokens": 0}})
    start = max(obj["meta_info"]["prompt_tokens"] - 2, 0)  # sglang's token healing window
    obj = endpoint._generate_http_request(s, {
        "text": [s.text_ + c for c in choices],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0},
        "return_logprob": True,
        "return_text_in_logprobs": True,
        "logprob_start_len": start,
    })
    return ([heal(s.text_, r["meta_info"]["input_token_logprobs"]) for r in obj],
            [r["meta_info"]["output_token_logprobs"] for r in obj])


def plain_select(endpoint, s, choices: list[str], temperature: float,
                 choices_method: ChoicesSamplingMethod) -> ChoicesDecision:
    """``RuntimeEndpoint.select`` with the same requests, safe for the ``None`` first entry.

    Parameters
    ----------
    endpoint
        A ``RuntimeEndpoint`` (its ``_generate_http_request`` sends the bodies).
    s
        The program state (``s.text_`` is the prompt).
    choices, temperature, choices_method
        As sglang's ``select``.

    Raises
    ------
    ConfigError
        When ``temperature`` is not 0 (sglang's select is greedy only).
    """
    if temperature > 1e-5:
        raise ConfigError("select scores choices greedily: temperature must be 0")
    input_token_logprobs, output_token_logprobs = choice_entries(endpoint, s, choices)
    unconditional = None
    if choices_method.requires_unconditional_logprobs:
        ids = [[e[1] for e in entries] for entries in input_token_logprobs]
        out = endpoint._generate_http_request(s, {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                                  "return_logprob": True})
        unconditional = [r["meta_info"]["input_token_logprobs"] for r in out]
    return choices_method(
        choices=choices,
        normalized_prompt_logprobs=[mean_logprob(entries) for entries in input_token_logprobs],
        input_token_logprobs=input_token_logprobs,
        output_token_logprobs=output_token_logprobs,
        unconditional_token_logprobs=unconditional,
    )
