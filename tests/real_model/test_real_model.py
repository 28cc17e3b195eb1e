"""What the system guarantees with any model, checked on a real one: SmolLM2-135M-Instruct.

Every method compacts one of three real trajectories, each trajectory is
compacted, and SpeCompact also runs with SJC (``cpu_model.TIER_RUNS``), on a
real sglang CPU server (``conftest.py``); the compactions run once per
session and each test reads all of them.  Nothing here asserts what a good
summary says: a 135M model writes weak ones.  What must hold whatever the
model writes: well-formed sections, budgets, no label word or copied
placeholder as a line, truthful truncation, request counts that match the
server's own, and the judge's label mass in the stats.

Tests that read ``CompactConfig.min_label_mass``, ``stats.label_mass_min``,
``stats.label_mass_median`` or ``stats.unreliable_verdicts`` need the judge's
label-mass accounting; until it exists they fail saying so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from bench.harness import cpu_model
from sgl_speccompact.config import make_config
from sgl_speccompact.core.hermes_prompt import MIN_TARGET
from sgl_speccompact.launch.templates import CHATML_TEMPLATE, checkpoint_template
from sgl_speccompact.methods.assembly import INCOMPLETE_STOPS
from sgl_speccompact.methods.baselines import hermes_cap
from sgl_speccompact.methods.registry import METHODS
from sgl_speccompact.result import LineOrigin
from sgl_speccompact.schema import OPENCLAW_SLOTS
from tests.support.stream_replay import assert_stream_shows_the_result

pytestmark = pytest.mark.real_model

CFG = make_config(cpu_model.BUDGETS)
SLOT_METHODS = ("speccompact", "target_self")  # one section per schema slot, written slot by slot
JUDGING = ("speccompact",)  # methods whose lines the target judges (SJC judges every method's entries)
BRACKETED = re.compile(r"\[[^\]]+\]")
# the templates the slot formats show ("1. [First next step]"): a line of only these is a copied placeholder
PLACEHOLDERS = {p.lower() for slot in OPENCLAW_SLOTS for p in BRACKETED.findall(slot.body_format)}
HEADING = re.compile(r"^#{1,6} ")


def is_placeholder(line: str) -> bool:
    """``line`` is nothing but slot-format templates, list markers and emphasis.

    >>> is_placeholder("1. [First next step]"), is_placeholder("- **[Decision]**: [Brief rationale]")
    (True, True)
    >>> is_placeholder("[system]"), is_placeholder("1. [First next step] run the tests")
    (False, False)
    """
    spans = BRACKETED.findall(line)
    rest = re.sub(r"[-*+\d.):\s]", "", BRACKETED.sub("", line))
    return bool(spans) and all(p.lower() in PLACEHOLDERS for p in spans) and not rest


def picked(run) -> str:
    """The method that actually ran (auto's pick)."""
    return run.result.method


def headings(summary: str) -> list[str]:
    return [ln.lstrip("#").strip() for ln in summary.splitlines() if HEADING.match(ln)]


def sections_of(summary: str) -> dict[str, list[str]]:
    """Heading -> its non-blank body lines."""
    out, current = {}, None
    for ln in summary.splitlines():
        if HEADING.match(ln):
            current = ln.lstrip("#").strip()
            out[current] = []
        elif current is not None and ln.strip():
            out[current].append(ln.strip())
    return out


def judged(run) -> bool:
    return picked(run) in JUDGING or run.sjc


# ---------------------------------------------------------------- the model and the server


def test_the_converted_checkpoint_is_a_plain_llama_with_its_chatml_template(smol_model):
    config = json.loads((Path(smol_model) / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert checkpoint_template(smol_model, "target") == CHATML_TEMPLATE


def test_the_server_runs_the_launchers_cpu_command(smol_server):
    info = httpx.get(smol_server + "/server_info", timeout=60).json()
    assert info["device"] == "cpu" and info["sleep_on_idle"] is True
    assert info["dtype"] in ("bfloat16", "float32")


def test_every_method_ran_and_every_trajectory_was_compacted(runs, histories):
    assert [(r.method, r.trajectory, r.sjc) for r in runs] == cpu_model.tier_plan(histories)
    assert {r.method for r in runs if not r.sjc} == set(cpu_model.METHODS)
    assert {r.trajectory for r in runs} == set(histories) and len(histories) == len(cpu_model.TRAJECTORIES)
    assert {r.method for r in runs if r.sjc} == set(cpu_model.SJC_METHODS)
    assert all(r.method in (*METHODS, "auto") for r in runs)


@pytest.mark.parametrize("i", range(len(cpu_model.TIER_RUNS)))
def test_every_compaction_returns_a_summary_and_leaves_the_history_alone(runs, i):
    run = runs[i]
    assert run.error is None, f"{run.key}: {run.error}"
    assert run.result.summary.strip(), f"{run.key}: empty summary"
    assert not run.mutated, f"{run.key}: the caller's history was mutated"


# ---------------------------------------------------------------- the summary


def test_slot_methods_write_every_schema_section_once_in_order(done):
    for run in (r for r in done if picked(r) in SLOT_METHODS):
        res = run.result
        titles = [s.title for s in res.slots]
        assert len([s for s in res.slots if s.name != "ledger"]) == 6, run.key
        assert "ledger" not in [s.name for s in res.slots[:-1]], run.key  # the exact ledger, if any, last
        assert headings(res.summary) == titles, f"{run.key}: {headings(res.summary)}"


def test_every_summary_has_well_formed_sections(done):
    """Slot methods assemble their sections (checked exactly above); a one-shot summary is the model's
    own text, so with any model it is either well formed or reported incomplete, its missing or cut-off
    sections named."""
    for run in done:
        res = run.result
        heads = headings(res.summary)
        incomplete = [s.name for s in res.slots if s.stop_reason in INCOMPLETE_STOPS]
        assert not any(s.name == "summary" and s.stop_reason == "complete" for s in res.slots) or \
            len(res.slots) > 1, f"{run.key}: output with no section reported as one complete slot"
        if res.truncated:
            assert incomplete, f"{run.key}: truncated, but no section is reported incomplete"
            continue
        assert heads, f"{run.key}: no section heading, and not reported incomplete"
        assert all(heads), f"{run.key}: an empty heading"
        assert len(heads) == len(set(heads)), f"{run.key}: a section twice: {heads}"


def test_slot_lines_are_the_lines_under_their_heading(done):
    for run in (r for r in done if picked(r) in SLOT_METHODS and not r.sjc):
        body = sections_of(run.result.summary)
        for slot in run.result.slots:
            written = [ln.text.strip() for ln in slot.lines if ln.text.strip()]
            assert written == body[slot.title][:len(written)], f"{run.key}/{slot.name}"


def test_no_label_word_and_no_placeholder_is_a_line(done):
    labels = {CFG.positive_label.lower(), CFG.negative_label.lower()}
    for run in done:
        for ln in run.result.summary.splitlines():
            bare = ln.strip().strip(".:").lower()
            assert bare not in labels, f"{run.key}: label word as a line: {ln!r}"
            assert not is_placeholder(ln), f"{run.key}: placeholder copied from the slot format: {ln!r}"


def test_budgets_are_held(done):
    hermes = hermes_cap(MIN_TARGET, CFG)
    for run in done:
        res = run.result
        if picked(run) in SLOT_METHODS:
            for slot in res.slots:
                if slot.name == "ledger":  # its own budget: max_ledger_tokens
                    assert slot.tokens <= CFG.max_ledger_tokens, run.key
                    continue
                lines = [ln for ln in slot.lines if ln.text.strip()]
                assert len(lines) <= CFG.max_lines_per_slot, f"{run.key}/{slot.name}: {len(lines)} lines"
                assert slot.tokens <= CFG.max_tokens_per_slot, f"{run.key}/{slot.name}: {slot.tokens} tokens"
            assert res.summary_tokens <= CFG.max_summary_tokens, run.key
        generate = res.stats.requests.get("target", {}).get("generate")
        if picked(run) == "openclaw":
            assert generate.completion_tokens <= CFG.monolithic_max_tokens, run.key
        if picked(run) == "hermes":
            assert generate.completion_tokens <= hermes, run.key
        drafts = res.stats.requests.get("drafter", {})
        for kind, count in drafts.items():
            if kind == "draft":
                assert count.completion_tokens <= CFG.max_new_tokens * count.requests, f"{run.key}: {kind}"


# ---------------------------------------------------------------- truthful reports


def test_a_slot_cut_short_makes_the_result_truncated_and_is_never_shown_empty(done):
    for run in done:
        res = run.result
        # both ways: a truncated result names the slot that was cut short (a one-shot's last section, a
        # missing one); a slot that stopped at its line or token budget holds what fits: not cut short
        short = [s for s in res.slots if s.stop_reason in INCOMPLETE_STOPS]
        assert res.truncated == bool(short), \
            f"{run.key}: truncated={res.truncated}, slots cut short: {[(s.name, s.stop_reason) for s in short]}"
        body = sections_of(res.summary)
        for slot in short:
            assert body.get(slot.title) != ["(none)"], f"{run.key}/{slot.name} ({slot.stop_reason}) shown as (none)"


def test_a_one_shot_summary_its_cap_cut_off_is_reported_truncated(done):
    hermes = hermes_cap(MIN_TARGET, CFG)
    for run in (r for r in done if picked(r) in ("hermes", "openclaw")):
        cap = hermes if picked(run) == "hermes" else CFG.monolithic_max_tokens
        generated = run.result.stats.requests["target"]["generate"].completion_tokens
        if generated >= cap:
            assert run.result.truncated, f"{run.key}: {generated} tokens at a cap of {cap}, not reported truncated"


def test_request_and_token_counts_equal_the_servers_own(done):
    for run in done:
        client = cpu_model.client_counts(run.result)
        assert client == run.server, f"{run.key}: the stats say {client}, the server counted {run.server}"


def test_every_kind_of_request_is_counted(done):
    for run in done:
        for role, kinds in run.result.stats.requests.items():
            for kind, count in kinds.items():
                assert count.requests > 0 and count.prompt_tokens > 0, f"{run.key}: {role}/{kind} {count}"
    spec = [r for r in done if picked(r) == "speccompact" and not r.sjc]
    assert spec, "no SpecCompact run returned"
    for run in spec:
        stats = run.result.stats
        assert stats.requests["target"]["verify"].requests >= stats.proposed_lines - stats.unjudged_lines > 0, run.key


def test_auto_records_its_pick_and_runs_it(done):
    autos = [r for r in done if r.method == "auto"]
    assert autos
    for run in autos:
        auto = run.result.stats.auto
        assert auto and auto["method"] in METHODS and auto["method"] == run.result.method, f"{run.key}: {auto}"


def test_source_judged_compaction_reports_every_entry_it_kept_or_deleted(done):
    sjc = [r for r in done if r.sjc]
    assert sjc
    for run in sjc:
        report = run.result.source_judge
        assert report and report["entries"], f"{run.key}: no SJC report"
        for entry in report["entries"]:
            assert (entry["text"] in run.result.summary) == entry["kept"], f"{run.key}: {entry}"
        assert report["deleted"] == sum(not e["kept"] for e in report["entries"])


# ---------------------------------------------------------------- judge health (label mass)


def test_the_config_has_a_label_mass_threshold():
    assert hasattr(CFG, "min_label_mass"), "CompactConfig has no min_label_mass: the judge's label mass is not checked"
    assert 0.0 < CFG.min_label_mass < 1.0


def test_judging_runs_report_the_label_mass_of_their_verdicts(done):
    runs = [r for r in done if judged(r)]
    assert runs
    for run in runs:
        stats = run.result.stats
        for name in ("label_mass_min", "label_mass_median", "unreliable_verdicts"):
            assert hasattr(stats, name), f"CompactionStats has no {name}: the judge's label mass is not reported"
        assert 0.0 <= stats.label_mass_min <= stats.label_mass_median <= 1.0, f"{run.key}: {stats}"
        verdicts = stats.proposed_lines + len((run.result.source_judge or {}).get("entries", []))
        assert 0 <= stats.unreliable_verdicts <= verdicts, run.key


def test_verdicts_below_the_threshold_are_counted_unreliable(done):
    for run in (r for r in done if judged(r)):
        stats = run.result.stats
        assert hasattr(stats, "label_mass_min"), "CompactionStats has no label_mass_min"
        assert (stats.label_mass_min < CFG.min_label_mass) == (stats.unreliable_verdicts > 0), \
            f"{run.key}: lowest mass {stats.label_mass_min}, {stats.unreliable_verdicts} unreliable verdicts"


def test_every_stream_shows_exactly_the_result(done):
    """Replayed as a client renders them, each compaction's events show the result's lines, slot by slot."""
    for run in done:
        assert run.events, run.key
        assert_stream_shows_the_result(run.events, run.result.slots)


CHECKED = (LineOrigin.DRAFTED, LineOrigin.CARRIED, LineOrigin.REPAIRED)  # the origins the evidence check admits


def test_no_accepted_line_of_speccompact_names_a_string_without_a_source(done, histories):
    from sgl_speccompact.core.evidence import LineSources
    from sgl_speccompact.history.messages import parse_messages, render_history
    from sgl_speccompact.history.redaction import redact_turns

    ran = [r for r in done if picked(r) == "speccompact"]
    assert ran, "no SpecCompact run returned a result"
    for run in ran:
        turns, _ = redact_turns(parse_messages(histories[run.trajectory]))
        sources = LineSources(render_history(turns))  # the tier's compactions have no previous summary
        for line in (ln for s in run.result.slots for ln in s.lines if ln.origin in CHECKED):
            assert sources.check(line.text).passed, (run.key, line.text, sources.check(line.text).missing)
