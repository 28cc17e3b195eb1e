"""What one latency-bench cell runs: methods x layouts x Hermes lengths, and the agent-session scenario.

* **Cases.** A slot method (``speccompact``, ``target_self``: a shared target
  prefix) runs once per ``--layouts`` entry (``classic``: our own rendering;
  ``agent``: the agent's chat-templated conversation,
  ``sgl_speccompact/backends/layout.py``).  Hermes-style runs once per ``--hermes-tokens`` value and
  always on its own fresh summarisation prompt (what Hermes Agent sends: a
  transcript inside one new user message), so its rows are ``classic``.
  OpenClaw-style is a one-shot prompt too.
* **Scenario** ``agent-session``: before each compaction, the agent's session
  (every assistant turn of the history as one ``/v1/chat/completions``
  request, ``sgl_speccompact/testing/session.py``) runs on the simulated
  target in a run of its own, on a fresh cache; the compaction then runs
  with the radix trees kept and its clock from 0.  The session's time is
  reported (``session.session_s``) and is NOT part of the compaction's
  end-to-end.  Scenario ``cold``: every compaction on empty caches.
"""

from __future__ import annotations

SLOT_METHODS = ("speccompact", "target_self")  # methods with a shared target prefix, and so a layout
LAYOUTS = ("classic", "agent")
SESSION_NOTE = ("the agent's session (every assistant turn as one chat completion on the simulated target) runs "
                "before each compaction and is NOT part of its end-to-end")
GOALS = {  # (target preset, reference) -> speedup goal of SpecCompact on the agent layout, two-gpu deployment
    ("qwen3-8b", "hermes"): 5.0, ("qwen3-32b", "hermes"): 10.0, ("qwen3-32b", "target_self"): 1.5,
}
GOAL_DEPLOYMENT = "two-gpu"  # the goals are set for the drafter on its own GPU


def cases(methods: list[str], layouts: list[str], hermes_tokens: list[int]) -> list[dict]:
    """``{"method", "layout", "hermes_tokens", "label"}`` for every run of one history.

    >>> [c["label"] for c in cases(["hermes", "speccompact"], ["classic", "agent"], [1200, 2000])]
    ['hermes@1200', 'hermes@2000', 'speccompact/classic', 'speccompact/agent']
    >>> [c["label"] for c in cases(["hermes", "target_self"], ["classic"], [2000])]
    ['hermes', 'target_self']
    """
    out = []
    for m in methods:
        if m == "hermes":
            out += [{"method": m, "layout": "classic", "hermes_tokens": n,
                     "label": f"hermes@{n}" if len(hermes_tokens) > 1 else m} for n in hermes_tokens]
        elif m in SLOT_METHODS:
            out += [{"method": m, "layout": lay, "hermes_tokens": None,
                     "label": f"{m}/{lay}" if len(layouts) > 1 else m} for lay in layouts]
        else:
            out.append({"method": m, "layout": "classic", "hermes_tokens": None, "label": m})
    return out


def runner_kwargs(case: dict, tokenizer_path: str) -> dict:
    """Layout arguments of ``run_method`` for a case (the agent layout renders with the target's tokenizer)."""
    if case["method"] not in SLOT_METHODS:
        return {}
    if case["layout"] == "agent":
        return {"layout": "agent", "chat_template": tokenizer_path}
    return {"layout": "classic"}


def run_session(sim, messages: list[dict]) -> dict:
    """The agent's session on the simulated target, in a run of its own (fresh caches); its numbers."""
    from sgl_speccompact.testing.sim.session import replay_session

    target = sim.endpoint("target")
    numbers, report = sim.run(lambda: replay_session(lambda path, body: target._request("POST", path, body),
                                                     messages))
    return {**numbers, "session_s": report["e2e_s"]}


def first_target(report: dict) -> dict:
    """Prompt and cached tokens of the compaction's first target ``/generate`` request."""
    first = next((r for r in report["requests"] if r.server == "target" and r.path == "/generate"), None)
    return {"prompt_tokens": first.prompt_tokens if first else None,
            "cached_tokens": first.cached_tokens if first else None,
            "role": first.role if first else None}


# ------------------------------------------------------------------ tables


def format_cache_table(summary: list[dict]) -> str:
    """Per (pair, deployment, p) and case: the target's cached tokens, e2e and the session's time."""
    out = []
    for cell in dict.fromkeys((s["model_pair"], s["deployment"], s["p_accept"]) for s in summary):
        rows = [s for s in summary if (s["model_pair"], s["deployment"], s["p_accept"]) == cell]
        if not any(s.get("mean_first_target") for s in rows):
            continue
        out.append(f"\nSIMULATED agent session then compaction, deployment {cell[1]}, {cell[0]}, p={cell[2]} "
                   f"(mean over {rows[0]['histories']} histories; {SESSION_NOTE})")
        out.append("| method | layout | e2e s | T first req prompt | T first req cached | T prompt total | "
                   "T cached total | session s (not in e2e) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for s in rows:
            f, t = s["mean_first_target"], s["mean_target_tokens"]
            sess = s.get("mean_session_s")
            out.append(f"| {s['label']} | {s['layout']} | {s['geomean_e2e_s']:.2f} | {f['prompt_tokens']:.0f} | "
                       f"{f['cached_tokens']:.0f} | {t['prompt_tokens']:.0f} | {t['cached_tokens']:.0f} | "
                       f"{'-' if sess is None else f'{sess:.2f}'} |")
    return "\n".join(out)


def goal_rows(summary: list[dict]) -> list[dict]:
    """SpecCompact on the agent layout against each reference, with the goal where one is set."""
    out = []
    for s in summary:
        if s["method"] != "speccompact" or s["layout"] != "agent":
            continue
        target = s["model_pair"].split(":")[0]
        for ref, value in sorted(s["geomean_speedups"].items()):
            kind = "hermes" if ref.startswith("hermes") else "target_self"
            goal = GOALS.get((target, kind)) if s["deployment"] == GOAL_DEPLOYMENT else None
            out.append({"model_pair": s["model_pair"], "deployment": s["deployment"], "p_accept": s["p_accept"],
                        "reference": ref, "speedup": value, "goal": goal,
                        "met": None if goal is None or value is None else value >= goal})
    return out


def format_goals(goals: list[dict]) -> str:
    if not goals:
        return ""
    out = ["\nSIMULATED goal check: SpecCompact on the agent layout vs each reference (geometric-mean speedup; "
           f"Hermes-style on its own classic prompt, Target-self on the agent layout; goals set for {GOAL_DEPLOYMENT})",
           "| model pair | deployment | p | reference | speedup | goal | met |", "|---|---|---|---|---|---|---|"]
    for g in goals:
        sp = "-" if g["speedup"] is None else f"{g['speedup']:.2f}x"
        goal = "-" if g["goal"] is None else f">= {g['goal']:g}x"
        met = "-" if g["met"] is None else ("yes" if g["met"] else "NO")
        out.append(f"| {g['model_pair']} | {g['deployment']} | {g['p_accept']} | {g['reference']} | {sp} | "
                   f"{goal} | {met} |")
    return "\n".join(out)
