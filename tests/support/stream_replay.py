"""Replays a compaction's events as a client that renders them would, for the stream tests."""

from __future__ import annotations


def displayed(events: list[dict]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """What a client shows per slot after ``events`` (line, retract, final line), and what ``slot_done`` said.

    Provisional lines are appended as they come, ``retract`` removes the
    line it names (and fails if it was never shown), a final ``line`` goes
    right after the line its ``after`` names (first when None).
    """
    shown: dict[str, list[tuple[int, str]]] = {}
    done: dict[str, list[str]] = {}
    for e in events:
        kind = e.get("type")
        if kind == "line":
            lines = shown.setdefault(e["slot"], [])
            assert isinstance(e["index"], int) and isinstance(e["final"], bool), e
            if not e["final"]:
                at = len(lines)
            elif e["after"] is None:
                at = 0
            else:
                at = 1 + next(i for i, (index, _) in enumerate(lines) if index == e["after"])
            lines.insert(at, (e["index"], e["text"]))
        elif kind == "retract":
            shown[e["slot"]].remove((e["index"], e["text"]))  # ValueError: a retraction of what was never shown
        elif kind == "slot_done":
            assert e["slot"] not in done, f"two slot_done events for {e['slot']}"
            done[e["slot"]] = list(e["lines"])
    return {slot: [text for _, text in lines] for slot, lines in shown.items() if lines}, done


def result_lines(slots: list) -> dict[str, list[str]]:
    """The result's content lines per slot (slots as models or as JSON dicts), slots with none left out."""
    out = {}
    for s in slots:
        name, lines = (s["name"], [l["text"] for l in s["lines"]]) if isinstance(s, dict) else (
            s.name, [l.text for l in s.lines])
        content = [t for t in lines if t.strip()]
        if content:  # sections that share a name are one slot to a client (methods.displayed.by_name)
            out[name] = out.get(name, []) + content
    return out


def assert_stream_shows_the_result(events: list[dict], slots: list) -> None:
    """The lines a client displays equal the result's, slot by slot, and so does every ``slot_done``."""
    shown, done = displayed(events)
    want = result_lines(slots)
    assert shown == want
    names = list(dict.fromkeys(s["name"] if isinstance(s, dict) else s.name for s in slots))
    assert list(done) == names  # one slot_done per slot name, in the result's order
    assert {k: v for k, v in done.items() if v} == want
