"""All retention measures for one trajectory, and their aggregation per method.

:func:`evaluate_trajectory` takes callables for everything that talks to a
server (compact, SJC post-filter, the target's and the judge's question
clients), so it runs the same against the emulator, real SGLang servers and
test doubles.  Per trajectory and method it compacts:

* the history itself: identifier recall and invention, adequacy judge;
* a copy with the planted facts: presence and the probe questions;
* the prefix before each cut point: the continuation check.

With SJC, each summary is also post-filtered and measured again, so the
``+sjc`` row is the same summary minus what SJC deleted (paired).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from . import adequacy, continuation, probes
from sgl_speccompact.history.identifiers import extract
from .recall import history_text, summary_retention
from .sjc import sjc_report

MEASURES = ("recall", "probes", "adequacy", "continuation")


@dataclass
class EvalSettings:
    """What to measure and how."""

    methods: tuple[str, ...]  # compaction methods to run
    sjc: tuple[bool, ...] = (False, True)  # conditions: without / with the SJC post-filter
    measures: tuple[str, ...] = MEASURES  # which measures to run
    facts: list[probes.Fact] = field(default_factory=list)  # planted facts (make_facts(seed))
    cut_depths: tuple[float, ...] = continuation.DEPTHS  # continuation cut points (fractions of messages)


def slot_texts(result: Any) -> dict[str, str]:
    """Slot name -> the slot's lines joined (a result's sections)."""
    return {s.name: "\n".join(line.text for line in s.lines) for s in result.slots}


def _label(method: str, with_sjc: bool) -> str:
    return method + ("+sjc" if with_sjc else "")


def _variants(compact, sjc, method, messages, conditions) -> dict[bool, Any]:
    """Result per SJC condition (the filtered one is made from the plain one)."""
    base = compact(method, messages)
    return {flag: (sjc(base, messages) if flag else base) for flag in conditions}


def evaluate_trajectory(messages: list[dict], settings: EvalSettings, *,
                        compact: Callable[[str, list[dict]], Any], sjc: Callable[[Any, list[dict]], Any],
                        ask_target: Callable[[list[tuple[str, str]]], list[str]],
                        ask_judge: Callable[[list[tuple[str, str]]], list[str]]) -> list[dict]:
    """One row per (method, SJC condition) with every requested measure.

    ``compact(method, messages)`` returns a ``CompactionResult``;
    ``sjc(result, messages)`` its SJC-filtered copy; ``ask_*`` answer lists of
    ``(system, user)`` questions.  A failed compaction gives rows with
    ``error`` and no measures.
    """
    on = set(settings.measures)
    history = history_text(messages)
    history_ids = extract(history)
    planted, placements = probes.plant(messages, settings.facts) if "probes" in on else (messages, [])
    cuts = continuation.cut_points(messages, settings.cut_depths) if "continuation" in on else []
    tools = continuation.tools_of(messages)
    rows, judge_q, target_q = [], [], []  # questions: (row, key, index, (system, user))
    for method in settings.methods:
        try:
            main = _variants(compact, sjc, method, messages, settings.sjc)
            planted_res = _variants(compact, sjc, method, planted, settings.sjc) if "probes" in on else {}
            cut_res = [(i, _variants(compact, sjc, method, messages[:i], settings.sjc)) for i in cuts]
        except Exception as exc:  # noqa: BLE001 - one failed method does not end the evaluation
            rows += [{"method": method, "sjc": f, "label": _label(method, f), "error": f"{type(exc).__name__}: {exc}"}
                     for f in settings.sjc]
            continue
        for flag in settings.sjc:
            res = main[flag]
            row = {"method": method, "sjc": flag, "label": _label(method, flag), "summary": res.summary,
                   "summary_tokens": res.summary_tokens}
            if "recall" in on:
                row["recall"] = summary_retention(messages, res.summary, slot_texts(res))
                row["ledger"] = ledger_row(res)
            if flag:
                row["sjc_report"] = sjc_report(res.source_judge, history_ids, history)
            if "adequacy" in on:
                judge_q.append((row, "adequacy", 0, (adequacy.ADEQUACY_SYSTEM,
                                                     adequacy.adequacy_prompt(history, res.summary))))
            if "probes" in on:
                summary = planted_res[flag].summary
                row["probes"] = {"summary": summary, "facts": [
                    {**p, "present": probes.present(summary, f)} for p, f in zip(placements, _by_kind(settings))]}
                for k, f in enumerate(_by_kind(settings)):
                    target_q.append((row, "probes", k, (probes.PROBE_SYSTEM, probes.probe_prompt(summary, f))))
            if "continuation" in on:
                row["continuation"] = []
                for k, (i, variants) in enumerate(cut_res):
                    real = continuation.action_of(messages[i])
                    row["continuation"].append({"cut_index": i, "prefix_messages": i, "real": real.to_json(),
                                                "summary": variants[flag].summary})
                    target_q.append((row, "continuation", k, (continuation.CONTINUATION_SYSTEM,
                                     continuation.continuation_prompt(variants[flag].summary, tools))))
            rows.append(row)
    _answer(judge_q, ask_judge, tools, messages)
    _answer(target_q, ask_target, tools, messages)
    return rows


def _by_kind(settings: EvalSettings) -> list[probes.Fact]:
    """Facts in :func:`probes.plant`'s placement order (tool outputs first)."""
    return sorted(settings.facts, key=lambda f: f.kind != "tool_output")


def _answer(questions, ask, tools, messages) -> None:
    """Ask every question in one batch and file the replies into their rows."""
    if not questions:
        return
    replies = ask([q for *_, q in questions])
    for (row, key, k, _), reply in zip(questions, replies):
        if key == "adequacy":
            row["adequacy"] = adequacy.parse_adequacy(reply).to_json()
        elif key == "probes":
            fact = row["probes"]["facts"][k]
            fact.update(reply=reply, answered=probes.answered(reply, probes.Fact(
                fact["kind"], fact["depth"], fact["text"], fact["value"], fact["question"])))
        else:
            item = row["continuation"][k]
            predicted = continuation.parse_action(reply, tools)
            real = continuation.Action(**item["real"])
            item.update(reply=reply, predicted=predicted.to_json() if predicted else None,
                        **continuation.compare(predicted, real))


# ---------------------------------------------------------------- aggregation (pure)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def aggregate(rows: list[dict]) -> dict[str, dict]:
    """Per method label (``speccompact``, ``speccompact+sjc``, ...): the headline numbers.

    Recall is the mean over trajectories (macro) and over all identifiers
    (micro); rates are over all probes / cuts; adequacy is the mean score of
    the summaries the judge scored completely.

    >>> rows = [{"label": "m", "recall": {"summary": {"recall": 0.5, "kept_count": 1, "source_identifiers": 2,
    ...          "invented_count": 1}, "slots": {}}, "adequacy": {"score": 4}}]
    >>> a = aggregate(rows)["m"]
    >>> a["recall_macro"], a["invented"], a["adequacy_mean"]
    (0.5, 1, 4.0)
    """
    out: dict[str, dict] = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        ok = [r for r in mine if "error" not in r]
        rec = [r["recall"]["summary"] for r in ok if "recall" in r]
        bare = [r["recall"]["without_ledger"] for r in ok if "without_ledger" in r.get("recall", {})]
        ledgers = [r["recall"]["ledger"] for r in ok if r.get("recall", {}).get("ledger")]
        facts = [f for r in ok for f in r.get("probes", {}).get("facts", []) if f.get("message_index") is not None]
        conts = [c for r in ok for c in r.get("continuation", [])]
        scores = [r["adequacy"]["score"] for r in ok if "adequacy" in r]
        slots: dict[str, list] = {}
        for r in ok:
            for name, s in r.get("recall", {}).get("slots", {}).items():
                slots.setdefault(name, []).append(s["recall"])
        sj = [r["sjc_report"] for r in ok if r.get("sjc_report")]
        out[label] = {
            "trajectories": len(ok), "errors": len(mine) - len(ok),
            "recall_macro": _mean(s["recall"] for s in rec),
            "recall_micro": (sum(s["kept_count"] for s in rec) / sum(s["source_identifiers"] for s in rec)
                             if rec and sum(s["source_identifiers"] for s in rec) else None),
            "invented": sum(s["invented_count"] for s in rec) if rec else None,
            "recall_macro_without_ledger": _mean(s["recall"] for s in bare),
            "invented_without_ledger": sum(s["invented_count"] for s in bare) if bare else None,
            "ledger_invented": sum(s["invented_count"] for s in ledgers) if ledgers else None,
            "ledger_share": _mean(r["ledger"]["share"] for r in ok if r.get("ledger")),
            "slot_recall": {name: _mean(v) for name, v in slots.items()},
            "probe_presence": _mean(float(f["present"]) for f in facts),
            "probe_answered": _mean(float(f["answered"]) for f in facts if "answered" in f),
            "probes": len(facts),
            "adequacy_mean": _mean(scores),
            "adequacy_unscored": sum(s is None for s in scores),
            "continuation_tool": _mean(float(c["tool_match"]) for c in conts if "tool_match" in c),
            "continuation_key": _mean(float(c["key_match"]) for c in conts if "key_match" in c),
            "cuts": len(conts),
            "sjc_deleted": sum(s["deleted"] for s in sj) if sj else None,
            "sjc_deleted_with_invented": sum(s["deleted_with_invented"] for s in sj) if sj else None,
            "sjc_deleted_next_step": sum(s["deleted_next_step"] for s in sj) if sj else None,
            "sjc_kept_with_invented": sum(s["kept_with_invented"] for s in sj) if sj else None,
        }
    return out


def ledger_row(res) -> dict:
    """A result's ledger report as a row: its counts (entries and read-set files counted, not listed) and its
    share of the summary's tokens."""
    led = res.ledger
    if led is None:
        return {"share": 0.0}
    return {**led.model_dump(mode="json", exclude={"entries", "read_set"}), "entries": len(led.entries),
            "read_set": len(led.read_set), "share": led.tokens / max(res.summary_tokens, 1)}
