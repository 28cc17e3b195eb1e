"""Ablation benchmark: SpecCompact with none, each one, all but one and all of its optimizations (SIMULATED).

The switches are ``sgl_speccompact.config.OPTIMIZATIONS`` (CompactConfig bool
field -> description); every switch registered there is swept.  A switch
that is on by default is an **optimization** (the engine as shipped has
it); one that is off by default (``source_judge_on_prefix``) is an
**alternative** the defaults decided against.  Variants:

* ``none``: every optimization off (alternatives off too);
* ``only X``: ``none`` plus optimization X;
* ``all but X``: the defaults without optimization X;
* ``all (defaults)``: every optimization on, alternatives off;
* ``all + X``: the defaults plus alternative X.

Dependencies (:data:`NEEDS`, :data:`SJC_ONLY`): a switch that cannot act
under a variant's conditions (``source_judge_on_prefix`` needs
``--source-judge``) is not run again; the variant's row reuses the run with
the same effective configuration and says which (``same as``).

Every variant runs SpecCompact on the one-clock simulator through
bench/latency.py's ``simulate`` (same workload, deployments, cost model,
layouts and scenario), so every latency is SIMULATED, never a GPU
measurement.  Defaults: 8B and 32B targets with the 0.6B drafter, both
deployments, acceptance 0.7, ``--histories`` synthetic 16k-token histories
(one per seed), the agent layout after the agent's session (its tokens in
the target's radix cache) for every variant and the classic layout beside
it for ``--classic-variants``.  References, run once per history with the
default configuration: Hermes-style at each ``--hermes-tokens`` length and
Target-self on each layout.

Per variant and layout: geometric-mean end-to-end over the histories, its
speedup over Hermes-style (each length) and over Target-self (same layout),
its ratio to ``all (defaults)`` (> 1: slower), requests per server, and
whether it made the same decisions as ``all (defaults)`` on the same history
(``sim.workload.decisions``: which lines were accepted, replaced or
taken unjudged).  The column follows the rule of the switch tests: only a
variant whose flipped switches all change requests alone is checked; one
that flips a switch of ``config.PROMPT_CHANGING`` shows ``n/a`` (the workload's judge reads only the line, so its agreement
would say nothing about a real model's verdicts on a different prompt), and so does one that flips a switch of
``config.DECISION_CHANGING`` (it changes which lines are judged by design).

Usage:
    python -m bench.ablation                                   # the reference sweep
    python -m bench.ablation --model-pairs qwen3-32b:qwen3-0.6b --deployments two-gpu --histories 1
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from bench import latency
from bench.harness import runs

NEEDS: dict[str, tuple[str, ...]] = {}  # switch -> switches it needs on to act (none left)
SJC_ONLY = ("source_judge_on_prefix",)  # switches that act only with --source-judge
ALL = "all (defaults)"
CRITICAL = ("drafting", "verifying", "repairing", "generating", "waiting")  # critical-path parts in the table
YES = {True: "yes", False: "NO", None: "-"}  # same decisions as all (defaults)
NOT_CHECKED = "n/a"  # the variant flips a prompt- or decision-changing switch


def switches() -> tuple[list[str], list[str]]:
    """``(optimizations, alternatives)``: registered switches on / off by default."""
    from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig

    on = [n for n in OPTIMIZATIONS if CompactConfig.model_fields[n].default]
    return on, [n for n in OPTIMIZATIONS if n not in on]


def variants() -> list[tuple[str, dict]]:
    """``(label, CompactConfig overrides)`` of every variant, ``none`` first.

    >>> labels = [label for label, _ in variants()]
    >>> labels[0], ALL in labels, "only line_aware_stopping" in labels, "all but line_aware_stopping" in labels
    ('none', True, True, True)
    """
    on, alternatives = switches()
    none = dict.fromkeys(on, False)
    return ([("none", none)] + [(f"only {n}", {**none, n: True}) for n in on]
            + [(f"all but {n}", {n: False}) for n in on] + [(ALL, {})]
            + [(f"all + {n}", {n: True}) for n in alternatives])


def effective(overrides: dict, source_judge: bool) -> tuple[tuple, list[str]]:
    """The switches that can act under ``overrides``, and why the others cannot.

    >>> effective({}, False)[1]
    ['source_judge_on_prefix needs --source-judge']
    """
    from sgl_speccompact.config import OPTIMIZATIONS, CompactConfig

    cfg = {n: overrides.get(n, CompactConfig.model_fields[n].default) for n in OPTIMIZATIONS}
    why = []
    for n in OPTIMIZATIONS:
        if n in SJC_ONLY and not source_judge:
            cfg[n] = None
            why.append(f"{n} needs --source-judge")
            continue
        missing = [m for m in NEEDS.get(n, ()) if m in cfg and not cfg[m]]
        if missing and cfg[n] is not None:
            cfg[n] = None
            why.append(f"{n} needs {', '.join(missing)}")
    return tuple(sorted(cfg.items())), why


def declared_changes(overrides: dict, source_judge: bool) -> list[str]:
    """Switches a variant flips that may change prompts (and can act).

    >>> declared_changes({"line_aware_stopping": False}, True), declared_changes({"short_judge_suffix": False}, True)
    ([], ['short_judge_suffix'])
    """
    from sgl_speccompact.config import DECISION_CHANGING, PROMPT_CHANGING, CompactConfig

    key, _ = effective(overrides, source_judge)
    return sorted(n for n, v in key if v is not None and v != CompactConfig.model_fields[n].default
                  and n in PROMPT_CHANGING | DECISION_CHANGING)


def plan(args) -> list[dict]:
    """One entry per variant: its overrides, layouts and the variant whose run it reuses."""
    classic = set(args.classic_variants)
    keys = {label: effective(overrides, args.source_judge) for label, overrides in variants()}
    first: dict = {}
    for label in sorted(keys, key=lambda v: v not in ("none", ALL)):  # none and all run, the others reuse them
        first.setdefault(keys[label][0], label)
    out = []
    for label, overrides in variants():
        key, why = keys[label]
        layouts = [lay for lay in args.layouts if lay != "classic" or label in classic or "all" in classic]
        out.append({"variant": label, "overrides": overrides, "layouts": layouts, "inactive": why,
                    "same_as": None if first[key] == label else first[key],
                    "changes": declared_changes(overrides, args.source_judge)})
    return out


def run_cell_set(args, seed: int, methods: list[str], config: dict | None, layouts: list[str], runner) -> list[dict]:
    sub = argparse.Namespace(**{**vars(args), "seed": seed, "layouts": layouts, "seeds": 1, "hermes_slots": False,
                                "config": json.dumps(config) if config else None})
    rows, info = latency.simulate(sub, methods, runner)
    for r in rows:
        r["seed"] = seed
    return rows, info


def run(args) -> dict:
    from sgl_speccompact.config import OPTIMIZATIONS
    from bench.sim.workload import decisions_digest

    _, runner, runner_src = runs.resolve_methods()
    print("Method: SpecCompact end-to-end latency with none, each one, all but one and all of the optimizations "
          "of sgl_speccompact.config.OPTIMIZATIONS (alternatives added to all); speedup = reference e2e / variant "
          "e2e on the same history, deployment, model pair, acceptance rate and layout; vs all = variant e2e / "
          "all (defaults) e2e")
    print(f"Latency: {latency.SIMULATED_NOTE}.")
    print(f"Conditions: model pairs {','.join(args.model_pairs)}; deployments {','.join(args.deployments)}; "
          f"acceptance {','.join(map(str, args.p_accept))} ({'clustered' if args.clustered else 'independent'}); "
          f"histories: {args.histories} x synthetic {','.join(map(str, args.synthetic_tokens))}-token (seeds "
          f"{args.seed}..{args.seed + args.histories - 1})"
          + ("" if args.no_trajectories else " + trajectories") + f"; layouts {','.join(args.layouts)} "
          f"(classic for: {','.join(args.classic_variants)}); scenario {args.scenario}; Hermes-style writes "
          f"{' and '.join(map(str, args.hermes_tokens))} tokens; SJC {'on' if args.source_judge else 'off'}")
    sys.stdout.flush()
    entries = plan(args)
    digests: dict[tuple[int, str], list[str | None]] = {}
    rows, info = [], {}
    for seed in range(args.seed, args.seed + args.histories):
        refs, info = run_cell_set(args, seed, ["hermes", "target_self"], None, args.layouts, runner)
        rows += [{**r, "variant": "reference"} for r in refs]
        for e in entries:
            if e["same_as"] is not None:
                continue

            def recording(method, messages, _key=(seed, e["variant"]), **kw):
                try:
                    result = runner(method, messages, **kw)
                except BaseException:
                    digests.setdefault(_key, []).append(None)
                    raise
                digests.setdefault(_key, []).append(decisions_digest(result))
                return result

            got, info = run_cell_set(args, seed, ["speccompact"], e["overrides"], e["layouts"], recording)
            rows += [{**r, "variant": e["variant"], "overrides": e["overrides"]} for r in got]
    summary = summarize(rows, entries, digests)
    print(format_tables(summary, entries))
    now = datetime.now(UTC)
    report = {"benchmark": "ablation", "latency_kind": "simulated", "simulated_note": latency.SIMULATED_NOTE,
              "optimizations": dict(OPTIMIZATIONS), "variants": entries, "runner": runner_src,
              "timestamp": now.isoformat(timespec="seconds"), "conditions": vars(args), **info,
              "decisions": {f"{s}/{v}": d for (s, v), d in digests.items()},
              "comparable": comparable(digests, deciding(entries)), "rows": rows, "summary": summary}
    path = runs.write_json(report, args.out or str(runs.RESULTS_DIR / f"ablation-{now.strftime('%Y%m%dT%H%M%SZ')}.json"))
    print(f"wrote {path}")
    return report


def comparable(digests: dict, apart: frozenset = frozenset()) -> dict:
    """Per history seed: whether every SpecCompact run on it made the same decisions (the simulated
    judge reads only the line, and no switch changes what is asked of it), the variants in ``apart``
    (those that flip a switch of ``config.DECISION_CHANGING``, which changes which lines are judged by
    design) left out."""
    digests = {k: v for k, v in digests.items() if k[1] not in apart}
    out = {}
    for seed in sorted({s for s, _ in digests}):
        got = {d for (s, _), ds in digests.items() if s == seed for d in ds}
        out[str(seed)] = {"runs": sum(len(ds) for (s, _), ds in digests.items() if s == seed),
                          "distinct_decisions": len(got), "same": len(got) == 1 and None not in got}
    return out


def deciding(entries: list[dict]) -> frozenset:
    """The variants that flip a switch of ``config.DECISION_CHANGING`` (their decisions differ by design).

    >>> sorted(deciding([{"variant": "a", "changes": ["evidence_check"]}, {"variant": "b", "changes": []}]))
    ['a']
    """
    from sgl_speccompact.config import DECISION_CHANGING

    return frozenset(e["variant"] for e in entries if set(e["changes"]) & set(DECISION_CHANGING))


def same_decisions(digests: dict, variant: str) -> bool | None:
    """Whether every run of ``variant`` decided as ``all (defaults)`` did on the same history (None: no run).

    >>> same_decisions({(0, ALL): ["a", "a"], (0, "none"): ["a", "b"], (0, "x"): ["a"]}, "x")
    True
    >>> same_decisions({(0, ALL): ["a", "a"], (0, "none"): ["a", "b"]}, "none")
    False
    """
    mine = {(s, d) for (s, v), ds in digests.items() if v == variant for d in ds}
    if not mine:
        return None
    ref = {s: ds[0] for (s, v), ds in digests.items() if v == ALL and ds}
    return all(d is not None and d == ref.get(s) for s, d in mine)


def summarize(rows: list[dict], entries: list[dict], digests: dict) -> list[dict]:
    """Per (pair, deployment, p, layout, variant): geometric means over histories and speedups."""
    ok = [r for r in rows if r.get("e2e_s")]
    hist = lambda r: (r["model_pair"], r["deployment"], r["p_accept"], r["seed"], r["path"])
    hermes = {}
    selfs = {}
    for r in ok:
        if r["method"] == "hermes":
            hermes.setdefault(hist(r), {})[r.get("hermes_tokens")] = r["e2e_s"]
        elif r["method"] == "target_self":
            selfs[hist(r) + (r.get("layout", "classic"),)] = r["e2e_s"]
    base = {hist(r) + (r.get("layout", "classic"),): r["e2e_s"] for r in ok
            if r["method"] == "speccompact" and r["variant"] == ALL}
    cells = dict.fromkeys((r["model_pair"], r["deployment"], r["p_accept"], r.get("layout", "classic"))
                          for r in rows if r["method"] == "speccompact")
    lengths = sorted({n for v in hermes.values() for n in v if n})
    out = []
    for pair, dep, p, layout in cells:
        for e in entries:
            run_as = e["same_as"] or e["variant"]
            if layout not in e["layouts"]:
                continue
            rs = [r for r in ok if r["method"] == "speccompact" and r["variant"] == run_as
                  and (r["model_pair"], r["deployment"], r["p_accept"], r.get("layout", "classic")) == (pair, dep, p, layout)]
            failed = sum(1 for r in rows if "error" in r and r.get("variant") == run_as and r["model_pair"] == pair
                         and r["deployment"] == dep and r.get("layout", "classic") == layout)
            sp = lambda ref, rs=rs: latency.geomean(ref(r) / r["e2e_s"] for r in rs if ref(r))  # a one-line helper of this row
            out.append({
                "model_pair": pair, "deployment": dep, "p_accept": p, "layout": layout, "variant": e["variant"],
                "same_as": e["same_as"], "inactive": e["inactive"], "histories": len(rs), "failed": failed,
                "geomean_e2e_s": latency.geomean(r["e2e_s"] for r in rs),
                "speedup_vs_hermes": {n: sp(lambda r, n=n: hermes.get(hist(r), {}).get(n)) for n in lengths},
                "speedup_vs_target_self": sp(lambda r, layout=layout: selfs.get(hist(r) + (layout,))),
                "ratio_to_all": latency.geomean(r["e2e_s"] / base[hist(r) + (layout,)] for r in rs
                                                if base.get(hist(r) + (layout,))),
                "mean_target_requests": sum(r["target"]["requests"] for r in rs) / max(len(rs), 1),
                "mean_drafter_requests": sum(r["drafter"]["requests"] for r in rs) / max(len(rs), 1),
                "mean_parts_s": {k: sum(r["parts"].get(k, 0.0) for r in rs) / max(len(rs), 1) for k in latency.PARTS}
                if rs and rs[0].get("parts") else None,
                "changes": e["changes"],  # declared prompt-changing switches it flips
                "same_decisions": None if e["changes"] else same_decisions(digests, run_as),
            })
    return out


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _parts(parts: dict | None) -> str:
    """The critical slot's time per part of CRITICAL (the rest is before the fork and after the join)."""
    if not parts:
        return "-"
    return "/".join(f"{parts[k]:.2f}" for k in CRITICAL)


def format_tables(summary: list[dict], entries: list[dict]) -> str:
    out = []
    for cell in dict.fromkeys((s["model_pair"], s["deployment"], s["p_accept"], s["layout"]) for s in summary):
        rows = [s for s in summary if (s["model_pair"], s["deployment"], s["p_accept"], s["layout"]) == cell]
        lengths = list(rows[0]["speedup_vs_hermes"])
        n = max(s["histories"] for s in rows)
        out.append(f"\nSIMULATED ablation, deployment {cell[1]}, {cell[0]}, p={cell[2]}, layout {cell[3]} "
                   f"(SpecCompact, geometric mean over {n} histories; critical path: the critical slot's "
                   f"{' / '.join(CRITICAL)}, mean s)")
        out.append("| configuration | e2e s | " + " | ".join(f"vs Hermes@{k}" for k in lengths)
                   + " | vs Target-self | vs all | T reqs | D reqs | critical path s | same decisions |")
        out.append("|---" * (len(lengths) + 8) + "|")
        for s in rows:
            e2e = "-" if s["geomean_e2e_s"] is None else f"{s['geomean_e2e_s']:.2f}"
            name = s["variant"] + (f" (= {s['same_as']})" if s["same_as"] else "")
            out.append(f"| {name} | {e2e} | " + " | ".join(_x(s["speedup_vs_hermes"][k]) for k in lengths)
                       + f" | {_x(s['speedup_vs_target_self'])} | {_x(s['ratio_to_all'])} | "
                       f"{s['mean_target_requests']:.0f} | {s['mean_drafter_requests']:.0f} | "
                       f"{_parts(s['mean_parts_s'])} | "
                       f"{NOT_CHECKED if s.get('changes') else YES[s['same_decisions']]} |")
    out.append(f"\nsame decisions: {NOT_CHECKED} where the variant flips a switch that changes prompts "
               "(config.PROMPT_CHANGING): the simulated judge reads only the line, "
               "so agreement there says nothing about a real model; or one that changes which lines "
               "are judged (config.DECISION_CHANGING)")
    notes = sorted({w for e in entries for w in e["inactive"]})
    if notes:
        out.append("\nNot acting in some variants (their rows reuse the run with the same effective switches): "
                   + "; ".join(notes))
    failed = sum(s["failed"] for s in summary)
    if failed:
        out.append(f"\n{failed} run(s) failed; their histories are left out of the means (see the JSON rows)")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = latency.build_parser()
    p.description = "SIMULATED ablation of SpecCompact's optimizations: none, each alone, all but one, all."
    p.add_argument("--histories", type=int, default=2, help="synthetic histories, one per seed from --seed (default 2)")
    p.add_argument("--classic-variants", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   default=["none", ALL], help=f"variants also run on the classic layout (default 'none,{ALL}'; "
                   "'all' for every variant)")
    p.set_defaults(model_pairs=["qwen3-8b:qwen3-0.6b", "qwen3-32b:qwen3-0.6b"], p_accept=[0.7], plots=False,
                   layouts=["agent", "classic"], scenario="agent-session", hermes_tokens=[1200, 2000],
                   no_trajectories=True, synthetic_tokens=[16000])
    p.add_argument("--with-trajectories", dest="no_trajectories", action="store_false",
                   help="also the representative trajectories (default: synthetic histories only)")
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(build_parser().parse_args(argv))
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
