"""Source-Judged Compaction: entry splitting, deletion, one batched judge request."""

import json
import math
import os
import re
from pathlib import Path

import pytest
from sglang.srt.entrypoints.api_contract import generate_contract_error

from sgl_speccompact.methods.request import AgentLayout, MethodRequest
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.history.messages import environment_outputs, parse_messages
from sgl_speccompact.core.judge import label_choices
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.result import StatsRecorder
from sgl_speccompact.methods.source_judge import source_judge, split_entries

from tests.support.scripted import ENTRY_RE, ScriptedBackend, count_tokens
from tests.support.programs import MESSAGES, backends

ON_PREFIX = {"source_judge_on_prefix": True}  # the judgements branch from the compaction's prefix
JUDGE_ONLY = {"evidence_check": False}  # every entry goes to the judge: the tests of the judge's own path

SUMMARY = (
    "## Goal\n- Create /workspace/hello.py printing Hello, World!\n\n"
    "## Constraints & Preferences\n(none)\n\n"
    "## Progress\n### Done\n- [x] created /workspace/hello.py\n\n### In Progress\n- [ ] verify output\n\n"
    "## Next Steps\n1. Run python /workspace/hello.py\n2. Edit /etc/invented.conf to enable logging\n\n"
    "## Critical Context\n- /workspace/hello.py\n"
)
ENTRIES = [
    "- Create /workspace/hello.py printing Hello, World!",
    "- [x] created /workspace/hello.py",
    "- [ ] verify output",
    "1. Run python /workspace/hello.py",
    "2. Edit /etc/invented.conf to enable logging",
    "- /workspace/hello.py",
]
STRUCTURE = [line for line in SUMMARY.split("\n") if line not in ENTRIES]


def by_source(entry: str, environment: str) -> float:
    """A judge that checks every path of the entry against the sources."""
    paths = re.findall(r"/[\w./-]+\w", entry)
    return 0.9 if all(p in environment for p in paths) else 0.1


# ---------------------------------------------------------------- a SpecCompactEndpoint answered in-process

VOCAB = {"positive": 11, " positive": 12, "Positive": 13, " Positive": 14,
         "negative": 21, " negative": 22, "Negative": 23, " Negative": 24}


class InProcessEndpoint(SpecCompactEndpoint):
    """``SpecCompactEndpoint`` whose HTTP requests are answered here and recorded.

    ``judge(entry, environment) -> p`` answers judge prompts; ``summary`` is
    the text of every other generation.
    """

    def __init__(self, judge, summary="", model_path="Qwen/Qwen3-8B", model_type="qwen3"):
        self.judge_fn, self.summary, self.model_path, self.model_type = judge, summary, model_path, model_type
        self.bodies: list[tuple[str, dict | None]] = []
        super().__init__("http://in-process", token_ids=False)  # its ids cannot be decoded back

    def _request(self, method, path, body=None):
        self.bodies.append((path, body))
        if path == "/get_model_info":
            return {"model_path": self.model_path, "model_type": self.model_type}
        if path == "/tokenize":
            return {"tokens": [self._tokens(t) for t in body["prompt"]]}
        assert path == "/generate", path
        texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
        out = [self._answer(t, body) for t in texts]
        return out if isinstance(body["text"], list) else out[0]

    @staticmethod
    def _tokens(text):
        if text in VOCAB:
            return [VOCAB[text]]
        if text.strip().isupper():
            return [7, 7]  # "POSITIVE", "NEGATIVE": two tokens, so not label variants
        return [7] * count_tokens([text])[0]

    def _answer(self, text, body):
        meta = {"prompt_tokens": count_tokens([text])[0], "cached_tokens": 0, "completion_tokens": 0,
                "finish_reason": {"type": "length", "length": 0}}
        if "token_ids_logprob" in body:
            env = text.split("<environment>\n", 1)[1].split("\n</environment>", 1)[0]
            p = self.judge_fn(ENTRY_RE.findall(text)[-1], env)
            meta["output_token_ids_logprobs"] = [[[math.log(p), 11, None], [math.log(1 - p), 21, None]]]
            return {"text": "", "meta_info": meta}
        meta.update(completion_tokens=count_tokens([self.summary])[0], finish_reason={"type": "stop"})
        return {"text": self.summary, "meta_info": meta}

    def generates(self):
        return [b for p, b in self.bodies if p == "/generate"]


# ---------------------------------------------------------------- splitting


def test_entries_are_items_and_lines_under_headings():
    entries = split_entries(SUMMARY, ["(none)"])
    assert [e.text for e in entries] == ENTRIES
    assert [e.section for e in entries] == ["Goal", "Done", "In Progress", "Next Steps", "Next Steps",
                                           "Critical Context"]


def test_continuations_quotes_fences_and_labels():
    text = ("## Snapshot\n> quoted line one\n> quoted line two\nplain line\n"
            "- item\n  continued\n  - sub item\n```\ncode\n```\nDone:\n**Blocked**\n---\n- (none)\n")
    got = [e.text for e in split_entries(text, ["(none)"])]
    assert got == ["> quoted line one\n> quoted line two", "plain line", "- item\n  continued",
                   "  - sub item\n```\ncode\n```"]


# ---------------------------------------------------------------- the endpoint path: one batched request


def test_one_batched_request_for_all_entries_and_valid_bodies():
    target = InProcessEndpoint(by_source)
    filtered, report = source_judge(SUMMARY, MESSAGES, target=target, config=JUDGE_ONLY)
    gens = target.generates()
    # the sources every prompt shares, prefilled once; then one request carrying every entry's prompt
    assert len(gens) == 2 and isinstance(gens[1]["text"], list) and len(gens[1]["text"]) == 6
    warm, body = gens
    assert warm["sampling_params"]["max_new_tokens"] == 0 and all(t.startswith(warm["text"]) for t in body["text"])
    assert "</environment>" in warm["text"] and "<entry>" not in warm["text"]
    assert body["sampling_params"] == {"max_new_tokens": 0, "temperature": 0}
    assert body["return_logprob"] is True and body["token_ids_logprob"] == [11, 12, 13, 14, 21, 22, 23, 24]
    assert all(generate_contract_error(b) is None for b in gens)
    assert report.requests == 2
    # the invented path is the one entry without a source
    assert [e.kept for e in report.entries] == [True, True, True, True, False, True]
    assert "invented" not in filtered and filtered == SUMMARY.replace(
        "2. Edit /etc/invented.conf to enable logging\n", "")


def test_an_entry_naming_a_string_without_a_source_is_deleted_without_a_judge_request():
    target, recorder = InProcessEndpoint(lambda entry, env: 0.9), StatsRecorder()  # a judge that accepts anything
    filtered, report = source_judge(SUMMARY, MESSAGES, target=target, recorder=recorder)
    warm, body = target.generates()
    assert [ENTRY_RE.findall(t)[-1] for t in body["text"]] == [e for e in ENTRIES if "invented" not in e]
    refused = [e for e in report.entries if e.refused]
    assert [(e.text, e.refused, e.unsourced, e.kept, e.verdict) for e in refused] == [
        (ENTRIES[4], "evidence", ["/etc/invented.conf"], False, None)]
    assert report.deleted == 1 and "invented" not in filtered and recorder.stats.evidence_refused == 1
    assert report.model_dump(mode="json")["entries"][4]["unsourced"] == ["/etc/invented.conf"]


def test_batch_prompts_share_sources_as_a_prefix_and_use_the_chat_template():
    target = InProcessEndpoint(by_source)
    source_judge(SUMMARY, MESSAGES, target=target, previous_summary="## Goal\n- EARLIER-FACT", config=JUDGE_ONLY)
    texts = target.generates()[-1]["text"]
    shared = os.path.commonprefix(texts)
    assert shared.startswith("<|im_start|>system\n") and "<|im_start|>user\n" in shared
    assert "</environment>" in shared and "EARLIER-FACT" in shared and "<entry>" not in shared
    for text, entry in zip(texts, ENTRIES):
        assert f"<entry>\n{entry}\n</entry>" in text and "or the earlier summary" in text
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # Qwen3: thinking off
    # environment outputs: tool calls and results kept, the assistant's prose dropped
    assert "File created at /workspace/hello.py" in shared and "Creating it." not in shared


def test_endpoint_and_fallback_send_the_same_prompts():
    batch = InProcessEndpoint(by_source, model_path="Qwen/Qwen2.5-7B-Instruct", model_type="qwen2")  # qwen template, no think
    source_judge(SUMMARY, MESSAGES, target=batch)
    scripted = ScriptedBackend(source_judge=lambda entry, section: 0.9)
    source_judge(SUMMARY, MESSAGES, target=scripted)
    assert sorted(scripted.kinds("source_judge")) == sorted(batch.generates()[-1]["text"])
    assert scripted.kinds("prefill") == [batch.generates()[0]["text"]]  # the same shared part, prefilled


# ---------------------------------------------------------------- deletion rules (fallback path)


def test_deletes_exactly_the_entries_below_threshold_and_keeps_order():
    scores = {"verify output": 0.49, "invented": 0.1, "Run python": 0.5}
    target = ScriptedBackend(source_judge=lambda e, s: next((p for k, p in scores.items() if k in e), 0.8))
    recorder = StatsRecorder()
    filtered, report = source_judge(SUMMARY, MESSAGES, target=target, recorder=recorder, config=JUDGE_ONLY)
    assert [e.text for e in report.entries if not e.kept] == [ENTRIES[2], ENTRIES[4]]
    assert [e.score for e in report.entries][2:5] == pytest.approx([0.49, 0.5, 0.1])
    expected = [line for line in SUMMARY.split("\n") if line not in (ENTRIES[2], ENTRIES[4])]
    assert filtered.split("\n") == expected
    # one select per entry, after one prefill of the shared sources (the same policy as a batch)
    assert len(target.kinds("source_judge")) == 6 and len(target.kinds("prefill")) == 1
    assert recorder.stats.requests["target"]["judge"].requests == 7 == report.requests
    assert "</environment>" in target.kinds("prefill")[0]
    json.dumps(report.model_dump(mode="json"))


def test_headings_markers_and_blank_lines_are_never_deleted():
    target = ScriptedBackend(source_judge=lambda e, s: 0.0)
    filtered, report = source_judge(SUMMARY, MESSAGES, target=target, config={"source_judge_threshold": 0.9, **JUDGE_ONLY})
    assert report.deleted == 6 and filtered.split("\n") == STRUCTURE
    judged = [ENTRY_RE.findall(t)[-1] for t in target.kinds("source_judge")]
    assert sorted(judged) == sorted(ENTRIES)  # no heading, marker or blank line was asked about


def test_a_summary_without_entries_sends_nothing():
    target = ScriptedBackend(source_judge=lambda e, s: 0.0)
    filtered, report = source_judge("## Goal\n(none)\n", MESSAGES, target=target)
    assert filtered == "## Goal\n(none)\n" and report.entries == [] and target.requests == []


# ---------------------------------------------------------------- as a flag of a method


def test_speccompact_with_source_judge_filters_summary_and_slots():
    target, drafter = backends()
    target.source_judge_fn = lambda entry, section: 0.1 if "BAD" in entry or "verify output" in entry else 0.9
    res = run_method("speccompact", MESSAGES, target=target, drafter=drafter, source_judge=True)
    assert "- [ ] verify output" not in res.summary and "### In Progress" in res.summary
    progress = {s.name: s for s in res.slots}["progress"]
    assert "- [ ] verify output" not in [l.text for l in progress.lines]
    assert res.summary_tokens == count_tokens([res.summary])[0]
    assert res.source_judge["deleted"] == 1 and res.source_judge["threshold"] == 0.5
    assert res.stats.requests["target"]["judge"].requests == len(target.kinds("source_judge")) + 1
    assert "source_judge" in res.stats.wall_time_s
    json.dumps(res.to_json_dict())


def test_monolithic_method_with_source_judge_over_the_endpoint():
    target = InProcessEndpoint(by_source, summary=SUMMARY)
    res = run_method("openclaw", MESSAGES, target=target, source_judge=True, config=JUDGE_ONLY)
    gens = target.generates()
    assert len(gens) == 3 and isinstance(gens[2]["text"], list) and len(gens[2]["text"]) == 6
    assert all(generate_contract_error(b) is None for b in gens)
    assert {k: c.requests for k, c in res.stats.requests["target"].items()} == {"generate": 1, "judge": 2}
    assert "invented" not in res.summary
    assert "2. Edit /etc/invented.conf to enable logging" not in [
        l.text for s in res.slots for l in s.lines]


# ---------------------------------------------------------------- against the SGLang-API emulator


def test_batched_and_fallback_judging_agree_on_the_emulator(make_emulated_server):
    from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

    from sgl_speccompact.emulator import ScriptedPolicy

    policy = ScriptedPolicy()
    policy.judge("/etc/invented.conf", p_positive=0.05, after="<entry>")
    policy.judge("</entry>", p_positive=0.95, after="<entry>")
    srv = make_emulated_server(policy=policy, model_path="Qwen/Qwen3-8B")
    filtered, report = source_judge(SUMMARY, MESSAGES, target=SpecCompactEndpoint(srv.url), config=JUDGE_ONLY)
    assert srv.stats()["total"]["requests"] == 1 + 6  # the shared sources' prefill, then six prompts in one request
    assert "invented" not in filtered and report.deleted == 1
    assert all(e.score == pytest.approx(0.95) for e in report.entries if e.kept)

    srv.reset_stats()
    plain = RuntimeEndpoint(srv.url, chat_template_name="chatml")
    filtered2, report2 = source_judge(SUMMARY, MESSAGES, target=plain, config=JUDGE_ONLY)
    assert [e.kept for e in report2.entries] == [e.kept for e in report.entries] and filtered2 == filtered
    # precache + per entry: one prefill and one batch scoring every label variant (the emulator counts
    # each batch item; the choices are all variants since one verdict rule covers both paths)
    n_choices = len(label_choices("positive", "negative")[0])
    assert srv.stats()["total"]["requests"] == 1 + 6 * (1 + n_choices) and report2.requests == 1 + 6 * 2


TRAJ_DIR = Path(__file__).resolve().parents[3] / "shared/data/trajectories"


@pytest.mark.skipif(not TRAJ_DIR.is_dir(), reason=f"shared trajectories not found at {TRAJ_DIR}")
def test_real_trajectory_keeps_a_real_path_and_drops_an_invented_one():
    from sgl_speccompact.history.formats import load_history

    messages = load_history(next(TRAJ_DIR.glob("*function_calling_simple*")))
    env = environment_outputs(parse_messages(messages))
    real = next(p for p in re.findall(r"/[\w./-]+\w", env) if p.count("/") >= 2)
    summary = (f"## Critical Context\n- {real}\n- /srv/never/seen_anywhere.py\n\n"
               "## Next Steps\n(none)\n")
    target = InProcessEndpoint(by_source)
    filtered, report = source_judge(summary, messages, target=target, config=JUDGE_ONLY)
    assert [e.kept for e in report.entries] == [True, False]
    assert filtered == f"## Critical Context\n- {real}\n\n## Next Steps\n(none)\n"
    assert len(target.generates()) == 2 and all(generate_contract_error(b) is None for b in target.generates())
    # with the evidence check (the default) the invented path is deleted before the judge: only the real one is asked
    target = InProcessEndpoint(by_source)
    again, report = source_judge(summary, messages, target=target)
    assert again == filtered and [e.refused for e in report.entries] == [None, "evidence"]
    assert report.entries[1].unsourced == ["/srv/never/seen_anywhere.py"] and report.entries[1].verdict is None
    asked = [ENTRY_RE.findall(t)[-1] for b in target.generates() for t in (b["text"] if isinstance(b["text"], list)
                                                                             else [b["text"]]) if "<entry>" in t]
    assert asked == [f"- {real}"]


# ---------------------------------------------------------------- on the compaction's shared prefix


@pytest.mark.parametrize("short", [True, False])
def test_after_a_slot_method_the_judge_prompts_branch_from_the_forked_prefix(short):
    for method in ("speccompact", "target_self"):
        if method == "speccompact":
            target, drafter = backends()
        else:
            from tests.support.methods import complete
            target, drafter = ScriptedBackend(complete=complete), None
        target.source_judge_fn = lambda entry, section: 0.9
        run_method(method, MESSAGES, target=target, drafter=drafter, source_judge=True,
                   previous_summary="## Goal\n- EARLIER-FACT",
                   config={"short_judge_suffix": short, **ON_PREFIX})
        forked = target.kinds("prefill")[0]  # the one prefix every slot branch starts with
        prompts = target.kinds("source_judge")
        assert prompts and all(p.startswith(forked) for p in prompts), method
        # the criterion names the sources inside the conversation: once in the prefix, or per entry
        rubric = "agent's own commentary is not a source"
        assert (rubric in forked) is short and "<environment>" not in prompts[0]
        for p in prompts:
            question = p[len(forked):].split("<|im_end|>")[0]
            assert (rubric in question) is not short
            assert "or the earlier summary" in (forked if short else question)
            if short:
                assert re.fullmatch(r'An entry of the section "[^"]+":\n<entry>\n.*\n</entry>', question, re.S)


def test_stand_alone_form_for_one_shot_summaries():
    from tests.support.methods import complete
    target = ScriptedBackend(complete=complete, source_judge=lambda entry, section: 0.9)
    run_method("openclaw", MESSAGES, target=target, source_judge=True)
    prompts = target.kinds("source_judge")
    assert prompts and all("<environment>" in p and "own commentary is not a source" not in p for p in prompts)


def test_source_judge_after_speccompact_reuses_the_cached_prefix_on_the_emulator(make_emulated_server):
    from sgl_speccompact.emulator import ScriptedPolicy
    from tests.support.methods import drafter_policy, load_trajectory, target_policy

    policy = ScriptedPolicy()
    policy.judge("Finish the task\n</entry>", p_positive=0.05, after="<entry>")
    policy.judge("</entry>", p_positive=0.95, after="<entry>")
    base = target_policy()
    policy.gen_rules += base.gen_rules
    policy.logprob_rules += base.logprob_rules
    target_srv = make_emulated_server(policy, model_path="Qwen/Qwen3-8B")
    drafter_srv = make_emulated_server(drafter_policy(), model_path="Qwen/Qwen3-0.6B", lora_paths=["drafter"])
    messages = load_trajectory("openai")
    target = SpecCompactEndpoint(target_srv.url)
    res = run_method("speccompact", messages, target=target, drafter=SpecCompactEndpoint(drafter_srv.url),
                     source_judge=True, config=ON_PREFIX)
    assert "Finish the task" not in res.summary and res.source_judge["deleted"] == 1
    prefill, judge = (res.stats.requests["target"][k] for k in ("prefill", "judge"))
    entries = len(res.source_judge["entries"])
    assert judge.requests == 2 and entries >= 5  # the (cached) shared part's prefill, then one batch
    # every judge prompt finds the compaction's whole shared prefix in the radix cache
    assert judge.cached_tokens >= entries * (prefill.prompt_tokens - 1)
    branch_new = judge.prompt_tokens - judge.cached_tokens  # tokens the judging prefilled

    # the stand-alone form on the same summary prefills the record again
    alone = StatsRecorder()
    source_judge(res.summary, messages, target=target, recorder=alone)
    counted = alone.stats.requests["target"]["judge"]
    alone_new = counted.prompt_tokens - counted.cached_tokens
    assert alone_new > branch_new + len(environment_outputs(parse_messages(messages))) // 8


def test_with_the_agent_layout_sjc_branches_from_the_agents_chat_prefix(emulator_tokenizer_path):
    from sgl_speccompact.core.prompts import SUMMARIZER_SYSTEM
    from tests.support.methods import complete

    target = ScriptedBackend(complete=complete, source_judge=lambda entry, section: 0.9)
    res = run_method("target_self", MethodRequest(MESSAGES, layout=AgentLayout("agent", chat_template=emulator_tokenizer_path)),
                     target=target, source_judge=True, config=ON_PREFIX)
    assert res.stats.layout == "agent"
    forked = target.kinds("prefill")[0]
    prompts = target.kinds("source_judge")
    assert prompts and all(p.startswith(forked) for p in prompts)
    assert SUMMARIZER_SYSTEM not in prompts[0]  # the agent's own turns, not our system turn
    assert prompts[0].count("<|im_start|>assistant") == forked.count("<|im_start|>assistant") + 1


def test_with_the_switch_off_sjc_stands_alone():
    target, drafter = backends()
    target.source_judge_fn = lambda entry, section: 0.9
    res = run_method("speccompact", MESSAGES, target=target, drafter=drafter, source_judge=True,
                     config={**ON_PREFIX, "source_judge_on_prefix": False})
    prompts = target.kinds("source_judge")
    assert prompts and all("<environment>" in p and "own commentary is not a source" not in p for p in prompts)
    assert res.source_judge["deleted"] == 0


PROSE = "I SUSPECT THE PARSER IS WRONG AND WILL REWRITE IT"  # the agent's own words: no source


@pytest.mark.parametrize("method", ["speccompact", "target_self"])
def test_the_default_judge_prompt_holds_no_assistant_text(method):
    from tests.support.methods import complete

    messages = [*MESSAGES[:2], {**MESSAGES[2], "content": PROSE}, *MESSAGES[3:]]
    prompts = {}
    for on_prefix in (False, True):
        target, drafter = backends() if method == "speccompact" else (ScriptedBackend(complete=complete), None)
        target.source_judge_fn = lambda entry, section: 0.9
        config = {"source_judge_on_prefix": True} if on_prefix else {}  # default: the faithful form
        run_method(method, messages, target=target, drafter=drafter, source_judge=True, config=config)
        prompts[on_prefix] = target.kinds("source_judge")
    assert prompts[False] and all(PROSE not in p and "File created at /workspace/hello.py" in p
                                  for p in prompts[False])
    # the on-prefix form shows the prose (excluded by instruction only): the trade-off it makes
    assert all(PROSE in p for p in prompts[True])


def test_a_long_summary_is_judged_in_bounded_batches():
    # before: every entry of the summary went in one request, bounded only by the summary's size
    from sgl_speccompact.methods.source_judge import ENTRIES_PER_REQUEST
    from tests.support.scripted import BatchJudgeBackend

    n = 2 * ENTRIES_PER_REQUEST + 6
    summary = "## Goal\n" + "\n".join(f"- entry {i}" for i in range(n))
    target = BatchJudgeBackend(source_judge=lambda entry, section: 0.1 if entry.endswith("7") else 0.9)
    filtered, report = source_judge(summary, MESSAGES, target=target)
    batches = [texts for kind, texts in target.requests if kind == "verify_batch"]
    assert [len(b) for b in batches] == [ENTRIES_PER_REQUEST, ENTRIES_PER_REQUEST, 6]
    assert [e.text for e in report.entries] == [f"- entry {i}" for i in range(n)]  # in order, every one judged
    gone = [e.text for e in report.entries if not e.kept]
    assert gone == [f"- entry {i}" for i in range(n) if str(i).endswith("7")] and report.deleted == len(gone)
    assert all(line not in filtered.split("\n") for line in gone)
    assert report.requests == 2 * len(batches)  # each batch: its shared sources prefilled, then one request
    assert all(e.verdict is not None and e.score == e.verdict.score for e in report.entries)
