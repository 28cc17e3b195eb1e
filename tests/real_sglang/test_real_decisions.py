"""The decision judge against the real server: sglang 0.5.23's own ``POST /v1/decisions``.

The target is the tier's tiny scripted Qwen3 with ``yes``/``no`` as its label
tokens (the route's labels); its reject markers move the logits to ``no``, so
which lines the route rejects is known: the drafted line holding REJECT, and
in SJC the repair holding NO_SOURCE.  The server renders every question with
the real Qwen3 chat template (reasoning off) and scores both labels itself.
"""

import pytest

from tests.real_sglang import scripts
from tests.real_sglang.reading import assert_scripted, history
from tests.support.tiny_qwen3 import Script
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.methods.judge_probe import probe_judges
from sgl_speccompact.methods.registry import run_method
from sgl_speccompact.methods.request import MethodRequest
from sgl_speccompact.config import CompactConfig
from sgl_speccompact.result import LineOrigin

pytestmark = pytest.mark.real_sglang

DECIDE = {**scripts.JUDGE, "judge": "decisions"}
YES_NO = Script(lines=scripts.TARGET.lines, default=scripts.TARGET.default, reject_markers=scripts.TARGET.reject_markers,
                positive=("yes", 4.0), negative=("no", 0.0))
REJECTED = "Delete" + scripts.REJECT + " archives"
REPAIRED = scripts.REPAIRS["next_steps"]


def compact(servers, **kw):
    return run_method("speccompact", MethodRequest(history(), schema=scripts.SCHEMA, **kw),
                      target=SpecCompactEndpoint(servers.target.url), drafter=SpecCompactEndpoint(servers.drafter.url),
                      config=DECIDE)


def test_the_route_judges_every_drafted_line_and_rejects_the_marked_one(servers):
    servers.target.use(YES_NO, "target-yes-no")
    res = compact(servers)
    assert_scripted(res.summary)
    assert REJECTED not in res.summary
    nxt = {s.name: s for s in res.slots}["next_steps"]
    assert [ln.text for ln in nxt.lines][1] == REPAIRED and nxt.lines[1].rejected_draft == REJECTED
    drafted = [ln for s in res.slots for ln in s.lines if ln.origin is LineOrigin.DRAFTED]
    assert len(drafted) == 11 and all(ln.score > 0.9 for ln in drafted)
    st = res.stats
    assert st.requests["target"]["verify"].requests == st.proposed_lines == 12  # one /v1/decisions each
    assert st.requests["target"]["verify"].prompt_tokens > 0  # the server's usage.prompt_tokens
    assert 0.0 < st.label_mass_min <= st.label_mass_median <= 1.0


def test_sjc_deletes_the_repair_without_a_source_through_the_route(servers):
    servers.target.use(YES_NO, "target-yes-no")
    res = compact(servers, source_judge=True)
    deleted = [e["text"] for e in res.source_judge["entries"] if not e["kept"]]
    assert deleted == [REPAIRED] and res.source_judge["requests"] == 1


def test_the_probe_measures_both_judges_on_the_real_server(servers):
    servers.target.use(YES_NO, "target-yes-no")
    probe = probe_judges(SpecCompactEndpoint(servers.target.url), CompactConfig(min_label_mass=0.0))
    assert not probe.errors and set(probe.masses) == {"program", "decisions"}
    # the program judge asks for positive/negative, which this model does not say; the route's yes/no it does
    assert probe.masses["decisions"] > probe.masses["program"]
