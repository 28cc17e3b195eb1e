"""What ``auto`` predicts with stays where it belongs.

* Label mass is kept per API key: a client that judges with words of its own (a model gives "yes"
  almost no mass) steers only its own picks.  Before, one estimate served every key, and the next
  key's ``auto`` said its target "cannot judge".
* The share of the previous summary a session held counts only for a request that can carry lines.
  Before, a request with no previous summary (or ``carry_previous_lines: false``) was predicted with
  the session's held share.
"""

from __future__ import annotations

from tests.support.service import FakeRunner, MESSAGES, make_client

from sgl_speccompact.methods.autopick import AcceptanceEstimate, deployment_for
from sgl_speccompact.result import LineOrigin, SlotResult, SummaryLine

LOW_MASS = 6.59e-07  # what a model gives a label word it never writes


def picker():
    return deployment_for("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", acceptance=AcceptanceEstimate(prior=0.7))


class MassRunner(FakeRunner):
    """Reports a tiny label mass when the request judged with "yes"/"no", a healthy one otherwise."""

    def __call__(self, method, request, **kw):
        res = super().__call__(method, request, **kw)
        own_words = kw["config"].positive_label == "yes"
        res.stats.label_mass_median = LOW_MASS if own_words else 0.9
        return res


def auto(client, key: str, **body) -> dict:
    res = client.post("/v1/compact", json={"messages": MESSAGES, **body}, headers={"Authorization": f"Bearer {key}"})
    assert res.status_code == 200, res.text
    return res.json()["stats"]["auto"]


def test_one_keys_label_words_never_steer_another_keys_auto():
    client, _ = make_client(MassRunner(), auto=picker())
    labels = {"positive_label": "yes", "negative_label": "no"}
    first = auto(client, "tenant-x", config=labels)
    assert "label_mass" not in first
    # tenant X's own next pick knows its words carry no mass
    assert auto(client, "tenant-x", config=labels)["label_mass"] == LOW_MASS
    # tenant Y, and an anonymous caller, never saw it
    for key in ("tenant-y", ""):
        got = auto(client, key) if key else client.post("/v1/compact", json={"messages": MESSAGES}).json()["stats"]["auto"]
        assert "label_mass" not in got and "cannot judge" not in got["reason"], got
        assert got["method"] in ("speccompact", "target_self", "target_delta")


def test_the_operators_labels_feed_the_service_wide_estimate():
    class Low(FakeRunner):
        def __call__(self, method, request, **kw):
            res = super().__call__(method, request, **kw)
            res.stats.label_mass_median = 0.004  # the operator's own words: the target cannot judge
            return res

    client, _ = make_client(Low(), auto=picker())
    auto(client, "tenant-x")
    got = auto(client, "tenant-y")  # a key with no compaction of its own reads the service's
    assert got["label_mass"] == 0.004 and "cannot judge" in got["reason"]


class HeldRunner(FakeRunner):
    """Keeps half the previous summary's lines (held share 0.5) when there is one."""

    def __call__(self, method, request, **kw):
        res = super().__call__(method, request, **kw)
        if request.previous_summary:
            lines = ["- kept line", "- new line"]
            res.summary = "## Goal\n" + "\n".join(lines)
            res.slots = [SlotResult(name="goal", title="Goal", stop_reason="complete",
                                    lines=[SummaryLine(text=t, origin=LineOrigin.TARGET) for t in lines])]
        return res


PREVIOUS = "## Goal\n- kept line\n- dropped line"


def test_a_request_that_cannot_carry_lines_is_predicted_with_no_held_share():
    client, _ = make_client(HeldRunner(), auto=picker())
    session = {"session": "s1"}
    auto(client, "k", previous_summary=PREVIOUS, **session)  # the session's compaction: half of it held
    carried = auto(client, "k", previous_summary=PREVIOUS, **session)
    assert carried["held_share"] == 0.5 and carried["session_pick"] == "held share"
    for body in ({}, {"previous_summary": PREVIOUS, "config": {"carry_previous_lines": False}}):
        got = auto(client, "k", **session, **body)
        assert "held_share" not in got, (body, got)
        assert "held share" not in got["reason"] and got.get("session_pick") != "held share", (body, got)
    # a request that can carry gets the held share again
    assert auto(client, "k", previous_summary=PREVIOUS, **session)["held_share"] == 0.5


def test_resolve_method_drops_the_held_share_where_nothing_can_be_carried():
    from sgl_speccompact.config import CompactConfig
    from sgl_speccompact.methods.request import MethodRequest, Offer
    from sgl_speccompact.methods.resolve import resolve_method

    offer = Offer(CompactConfig(), has_drafter=True)
    _, without = resolve_method("auto", MethodRequest(MESSAGES), offer, picker(), held=0.57)
    _, carrying = resolve_method("auto", MethodRequest(MESSAGES, PREVIOUS), offer, picker(), held=0.57)
    assert "held_share" not in without and carrying["held_share"] == 0.57
