"""Plain-text tables of the radix-cache benchmark."""

from __future__ import annotations

from sgl_speccompact.result import SERVERS

KIND_ABBR = {"prefill": "pf", "draft": "d", "verify": "v", "repair": "r", "generate": "g", "judge": "j"}


def _kinds(numbers: dict) -> str:
    parts = [f"{KIND_ABBR.get(k, k)}{c['requests']}" for k, c in numbers["requests_by_kind"].items()]
    return " ".join(parts) or "-"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_table(rows: list[dict], simulated: bool) -> str:
    """Aligned plain-text table, one line per (method, trajectory)."""
    head = ["method", "trajectory", "msgs"]
    for p in ("T", "D"):
        head += [f"{p} reqs", f"{p} by kind", f"{p} prompt", f"{p} cached", f"{p} computed", f"{p} hit"]
    head += ["T sfx/req", "accept", "xcheck"]
    if simulated:
        head += ["T sim busy s*", "D sim busy s*"]
    table, errors = [head], {}
    for r in rows:
        line = [r["method"], r["trajectory"], str(r["messages"])]
        if "error" in r:
            errors[len(table)] = f"ERROR {r['error'][:120]}"
            table.append(line)
            continue
        for role in SERVERS:
            n = r[role]
            line += [str(n["requests"]), _kinds(n), str(n["prompt_tokens"]), str(n["cached_tokens"]),
                     str(n["computed_tokens"]), _pct(n["cache_hit_ratio"])]
        sfx = r["target"]["mean_uncached_suffix_tokens"]
        checks = [r[role].get("crosscheck") for role in SERVERS]
        xcheck = "n/a" if any(c is None for c in checks) else ("ok" if all(c["ok"] for c in checks) else "MISMATCH")
        line += ["-" if sfx is None else f"{sfx:.1f}", _pct(r["acceptance_rate"]), xcheck]
        if simulated:
            line += [f"{r[role].get('simulated', {}).get('busy_s', 0.0):.3f}" for role in SERVERS]
        table.append(line)
    width = [max(len(t[i]) for t in table if i < len(t)) for i in range(len(head))]
    left = {0, 1, 4, 10}
    out = []
    for n, t in enumerate(table):
        cells = [c.ljust(width[i]) if i in left else c.rjust(width[i]) for i, c in enumerate(t)]
        out.append("  ".join(cells + ([errors[n]] if n in errors else [])).rstrip())
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def format_agent_table(rows: list[dict]) -> str:
    """Agent session then compaction: the target's prefix prefill, classic vs agent-aligned layout."""
    head = ("trajectory", "method", "layout", "agent turns", "prefill prompt", "prefill cached", "agent tok",
            "agent cached")
    out = [head]
    for r in rows:
        if "error" in r:
            continue
        out.append((r["trajectory"], r["method"], r.get("layout") or "", r.get("agent_turns", ""),
                    r.get("prefill_prompt_tokens"), r.get("prefill_cached_tokens"),
                    r.get("agent_tokens") if r.get("agent_tokens") is not None else "-",
                    r.get("agent_cached_tokens") if r.get("agent_cached_tokens") is not None else "-"))
    widths = [max(len(str(x[i])) for x in out) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) if i < 3 else str(v).rjust(w) for i, (v, w) in enumerate(zip(x, widths)))
             for x in out]
    return "Agent session, then compaction on the same target (prefix prefill = first target request):\n" + \
        "\n".join(lines)


