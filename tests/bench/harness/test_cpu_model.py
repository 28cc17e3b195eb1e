"""The real-model report's arithmetic: per-method means, the server cross-check, the table (no server)."""

from bench.harness import cpu_model


def row(method, wall, target_requests, recall, *, sjc=False, error=None, server=None):
    counts = {"requests": target_requests, "prompt_tokens": 100, "completion_tokens": 10}
    return {"method": method, "sjc": sjc, "wall_s": wall, "error": error, "per_role": {"target": {"generate": counts}},
            "acceptance": None, "label_mass_min": None, "recall": recall, "invented": 1, "truncated": False,
            "client_counted": counts, "server_counted": server or counts}


def test_means_are_over_the_runs_that_returned_and_sjc_is_apart():
    rows = [row("hermes", 10.0, 1, 0.5), row("hermes", 20.0, 1, 0.25), row("hermes", 0.0, 0, None, error="Timeout"),
            row("speccompact", 30.0, 9, 0.1, sjc=True)]
    hermes, sjc = cpu_model.by_method(rows)
    assert (hermes["method"], hermes["runs"], hermes["raised"], hermes["wall_s"]) == ("hermes", 3, 1, 15.0)
    assert hermes["recall"] == 0.38 and hermes["target_requests"] == 1 and hermes["drafter_requests"] == 0
    assert sjc["method"] == "speccompact+sjc" and sjc["target_requests"] == 9
    assert hermes["counts_match_server"] is True


def test_a_count_the_server_disagrees_with_is_flagged_and_the_table_has_every_method():
    rows = [row("openclaw", 5.0, 1, 0.2, server={"requests": 2, "prompt_tokens": 100, "completion_tokens": 10})]
    (summary,) = cpu_model.by_method(rows)
    assert summary["counts_match_server"] is False
    lines = cpu_model.table([summary]).splitlines()
    assert len(lines) == 3 and lines[2].startswith("| openclaw | 1 | 0 | 5 |") and "n/a" in lines[2]
