"""The evidence check in admission: a line naming a string no source shows is refused before any judge.

A drafted line goes to repair, a carried line is dropped before its batch is
built, a repair that fails stops the slot as a repair that fails its checks
does, and the target's own lines are not checked.  With ``evidence_check``
off every line reaches its judge as before.
"""

from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.speccompact import compact
from sgl_speccompact.result import LineOrigin, StopReason

from tests.support.programs import DRAFTS, MESSAGES, drafter_from
from tests.support.scripted import LINE_RE, BatchJudgeBackend, ScriptedBackend

INVENTED = "2. Edit /etc/invented.conf to enable logging"  # MESSAGES never show that path
OFF = {"evidence_check": False}


def judged_lines(target) -> list[str]:
    """Every line a judge request asked about, one by one or in batches."""
    texts = target.kinds("verify") + [t for kind, batch in target.requests if kind == "verify_batch" for t in batch]
    return [LINE_RE.findall(t)[-1] for t in texts]


def slot(res, name):
    return {s.name: s for s in res.slots}[name]


def run(drafts=None, repair=lambda s, acc: "2. Run the tests\n", judge=lambda s, line: 0.95, **kw):
    target = ScriptedBackend(judge=judge, repair=repair)
    drafter = ScriptedBackend(draft=drafter_from({**DRAFTS, "next_steps": ["1. Run python /workspace/hello.py",
                                                                         INVENTED]} if drafts is None else drafts))
    return compact(MESSAGES, target=target, drafter=drafter, **kw), target


def test_a_drafted_line_naming_an_invented_path_is_repaired_with_no_judge_request():
    res, target = run()  # a judge that accepts every line it is asked about
    nxt = slot(res, "next_steps")
    assert [line.text for line in nxt.lines] == ["1. Run python /workspace/hello.py", "2. Run the tests"]
    repaired = nxt.lines[1]
    assert repaired.origin is LineOrigin.REPAIRED and repaired.rejected_draft == INVENTED
    assert (repaired.refused, repaired.unsourced, repaired.rejected_verdict) == (
        "evidence", ["/etc/invented.conf"], None)
    assert INVENTED not in judged_lines(target) and "1. Run python /workspace/hello.py" in judged_lines(target)
    assert res.stats.evidence_refused == 1 and "invented" not in res.summary


def test_with_the_check_off_the_same_line_goes_to_the_judge():
    res, target = run(config=OFF)
    assert INVENTED in judged_lines(target) and INVENTED in [line.text for line in slot(res, "next_steps").lines]
    assert res.stats.evidence_refused == 0


def test_a_repair_naming_an_invented_string_stops_the_slot_as_a_failed_repair():
    drafts = {**DRAFTS, "next_steps": ["1. Run python /workspace/hello.py", "2. BAD deploy"]}
    res, _ = run(drafts, repair=lambda s, acc: f"{INVENTED}\n", judge=lambda s, line: 0.05 if "BAD" in line else 0.95)
    nxt = slot(res, "next_steps")
    assert nxt.stop_reason is StopReason.REPAIR_FAILED
    assert [line.text for line in nxt.lines] == ["1. Run python /workspace/hello.py"]
    assert res.stats.evidence_refused >= 1 and "invented" not in res.summary
    off, _ = run(drafts, repair=lambda s, acc: f"{INVENTED}\n", judge=lambda s, line: 0.05 if "BAD" in line else 0.95,
                 config=OFF)
    assert INVENTED in [line.text for line in slot(off, "next_steps").lines]


PREVIOUS = ("## Critical Context\n- /workspace/hello.py\n- Session `sess_8f3a91` holds the lock\n"
            "- Job `job_77ab` is queued\n")
LEDGER = "\n\n## Exact Ledger\n- m1 ran `queue submit job_77ab` exit `0`\n"  # job_77ab's source: the previous ledger


def test_a_carried_line_naming_an_invented_id_is_dropped_before_its_batch():
    target = BatchJudgeBackend(judge=lambda s, line: 0.95, repair=lambda s, acc: "")
    drafter = ScriptedBackend(draft=drafter_from(DRAFTS))
    res = compact(MESSAGES, target=target, drafter=drafter, previous_summary=PREVIOUS + LEDGER)
    asked = judged_lines(target)
    assert "- Session `sess_8f3a91` holds the lock" not in asked  # no judge request built for it
    assert "- /workspace/hello.py" in asked and "- Job `job_77ab` is queued" in asked
    carried = [line.text for line in slot(res, "critical_context").lines if line.origin is LineOrigin.CARRIED]
    assert carried == ["- /workspace/hello.py", "- Job `job_77ab` is queued"]
    assert res.stats.carried_proposed == 2 and res.stats.evidence_refused == 1
    # without the ledger the job id has no source either: it is dropped too
    target = BatchJudgeBackend(judge=lambda s, line: 0.95, repair=lambda s, acc: "")
    res = compact(MESSAGES, target=target, drafter=ScriptedBackend(draft=drafter_from(DRAFTS)),
                  previous_summary=PREVIOUS)
    assert "job_77ab" not in res.summary.split("## Exact Ledger")[0] and res.stats.evidence_refused == 2


def test_target_delta_checks_carried_lines_but_not_the_targets_own():
    written = "- Wrote /etc/invented.conf\n"  # the target's own line: never judged, never checked
    target = BatchJudgeBackend(judge=lambda s, line: 0.95, repair=lambda s, acc: "",
                               complete=lambda text, sp: written)
    res = run_method("target_delta", MESSAGES, target=target, previous_summary=PREVIOUS)
    lines = [line for s in res.slots for line in s.lines]  # the same written line in several slots is kept once
    assert [line.origin for line in lines if line.text == "- Wrote /etc/invented.conf"] == [LineOrigin.TARGET]
    assert "sess_8f3a91" not in res.summary and "job_77ab" not in res.summary
    assert res.stats.evidence_refused == 2  # the two carried lines with an unsourced id


def test_sources_are_indexed_only_for_methods_that_judge_and_only_once_a_line_names_a_string():
    from types import SimpleNamespace

    from sgl_speccompact.config import CompactConfig
    from sgl_speccompact.core.ledger import LedgerSection
    from sgl_speccompact.methods.speccompact import line_sources
    from sgl_speccompact.programs.context import SPECCOMPACT, TARGET_DELTA, TARGET_SELF

    job = SimpleNamespace(cfg=CompactConfig(), history="ran `pytest -x`", previous_summary=None,
                          carried_ledger=LedgerSection())
    assert line_sources(job, TARGET_SELF, {}) is None and line_sources(job, TARGET_DELTA, {}) is None
    assert line_sources(job, TARGET_DELTA, {"goal": ("- a",)}) is not None
    assert line_sources(SimpleNamespace(**{**vars(job), "cfg": CompactConfig(evidence_check=False)}), SPECCOMPACT,
                        {}) is None
    sources = line_sources(job, SPECCOMPACT, {})
    assert sources.check("- all good").passed and sources.built == {}  # nothing named: nothing indexed
    assert sources.check("- ran `pytest -x`").passed
    first = sources.built["history"]
    assert not sources.check("- ran `pytest -k nope`").passed and sources.built == {"history": first}
