"""Short judge suffix: the rubric and label words live in the cached shared prefix."""

import re

import pytest

from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.core.judge_prompts import judge_rubric
from sgl_speccompact.core.prompts import THINK_OFF

from tests.support.programs import MESSAGES, backends

TURN = "<|im_end|>\n<|im_start|>user\n"  # a verification's suffix starts by closing the slot's turn


def run(short, previous_summary=None):
    target, drafter = backends()
    res = compact(MESSAGES, target=target, drafter=drafter, config={"short_judge_suffix": short},
                  previous_summary=previous_summary)
    return res, target


def suffixes(target):
    """``(suffix as a Qwen3 endpoint sends it, judged line)`` of every verification."""
    out = []
    for text in target.kinds("verify"):
        if "still holds" in text[text.rindex(TURN):]:
            continue  # a carried line's question is always the long one (prompts.CARRIED_QUESTION)
        line = re.findall(r"<line>\n(.*)\n</line>", text)[-1]
        out.append((text[text.rindex(TURN):] + THINK_OFF, line))
    return out


@pytest.mark.parametrize("previous", [None, "## Goal\n- EARLIER"])
def test_the_rubric_is_in_the_shared_prefix_once_and_the_suffix_is_the_line(previous):
    res, target = run(True, previous)
    prefix = target.kinds("prefill")[0]
    rubric = judge_rubric("positive", "negative", has_previous=bool(previous))
    assert prefix.endswith(rubric) and prefix.count("Reply with one word") == 2
    assert ("or the earlier summary" in rubric) is bool(previous)
    for suffix, line in suffixes(target):
        assert suffix == f"{TURN}<line>\n{line}\n</line><|im_end|>\n<|im_start|>assistant\n{THINK_OFF}"
    long_res, long_target = run(False, previous)
    assert "Reply with one word" not in long_target.kinds("prefill")[0]
    assert all("Reply with one word: positive or negative." in s for s, _ in suffixes(long_target))
    # the same verdicts give the same summary in both forms
    assert long_res.summary == res.summary
    assert [[l.origin for l in s.lines] for s in long_res.slots] == [[l.origin for l in s.lines] for s in res.slots]


def test_suffix_length_in_tokens(emulator_tokenizer):
    count = lambda text: len(emulator_tokenizer.encode(text, add_special_tokens=False))
    _, short = run(True)
    _, long = run(False)
    overhead = {name: [count(s) - count(line) for s, line in suffixes(t)] for name, t in
                (("short", short), ("long", long))}
    assert overhead["short"] and max(overhead["short"]) <= 30  # Qwen3: 20 (bench/judge_suffix.py)
    assert min(overhead["long"]) >= max(overhead["short"]) + 30


def test_benchmark_policy_judges_the_short_forms_on_the_emulator(make_emulated_server):
    from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
    from sgl_speccompact.emulator import ControlledAcceptancePolicy

    target = make_emulated_server(ControlledAcceptancePolicy(p_accept=0.7), model_path="Qwen/Qwen3-8B")
    drafter = make_emulated_server(ControlledAcceptancePolicy(seed=1), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    res = run_method("speccompact", MESSAGES, target=SpecCompactEndpoint(target.url),
                     drafter=SpecCompactEndpoint(drafter.url), source_judge=True)
    # every judgement got the policy's label logprobs: confident scores only, some of each verdict
    scores = [l.score for s in res.slots for l in s.lines if l.score is not None]
    scores += [e["score"] for e in res.source_judge["entries"]]
    assert scores and all(s == pytest.approx(0.95) or s == pytest.approx(0.05) for s in scores)
    assert res.stats.proposed_lines > 0 and 0 < res.stats.acceptance_rate


@pytest.mark.e2e  # runs the whole bench script
def test_judge_suffix_benchmark_prints_both_forms(tmp_path, capsys):
    import json

    from tests.support.bench_scripts import load_bench

    path = tmp_path / "history.json"
    path.write_text(json.dumps(MESSAGES))
    assert load_bench("judge_suffix").main(["--trajectories", str(path)]) == 0
    out = capsys.readouterr().out
    assert "prompt-length measurements, not latencies" in out and "tokenizer:" in out
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("history.json")}
    assert set(rows) == {"short", "long"}
    assert float(rows["short"][4]) + 30 < float(rows["long"][4])  # overhead beyond the line, in tokens
