"""What the scripted real-server models write: one marker word per slot, known lines.

The test schema puts each slot's marker word in its body format, which only
that slot's request carries (the shared prefixes list names, titles and
contracts), so the drafter and the target write that slot's lines there.
A drafted line holding REJECT is judged negative by the marker judge; the
target's repair lines hold NO_SOURCE, which Source-Judged Compaction's
judge deletes.  Every word is a single Qwen3 token used once per model.
"""

from __future__ import annotations

from sgl_speccompact.schema import Slot
from tests.support.tiny_qwen3 import Script, written_lines

REJECT = " Gibraltar"  # in a proposed line: the target judges it negative
REJECT_DEFAULT = " Montreal"  # the same, in the drafter's line for slots without a marker
NO_SOURCE = " Zurich"  # in a summary entry: the source judge deletes it
LABELS = ("positive", "negative")
# The tiny models set their label logits by hand but give their script's next token most of
# the next-token probability, so their labels carry far less than the default min_label_mass:
# their verdicts are read by r alone here (the guard itself is tested on scripted backends)
JUDGE = {"min_label_mass": 0.0}

MARKERS = {  # slot name -> marker word in its body format
    "goal": " Tasmania", "constraints": " Nairobi", "progress": " Helsinki",
    "decisions": " Lisbon", "next_steps": " Kyoto", "context": " Havana",
}
TITLES = {"goal": "Goal", "constraints": "Constraints", "progress": "Progress",
          "decisions": "Decisions", "next_steps": "Next Steps", "context": "Context"}

SCHEMA: tuple[Slot, ...] = tuple(
    Slot(name=name, title=TITLES[name], contract=f"What the session established about {TITLES[name].lower()}.",
         body_format=f"- one fact per line, in{marker} style")
    for name, marker in MARKERS.items()
)

# Drafter: two lines per slot; next_steps' second line carries REJECT.
DRAFTS = {
    "goal": ("Migrate billing exporter", "Preserve invoice numbering"),
    "constraints": ("Avoid downtime windows", "Stay within quota"),
    "progress": ("Rewrote ledger module", "Timed nightly batch"),
    "decisions": ("Chose streaming parser", "Removed legacy cron"),
    "next_steps": ("Deploy canary cluster", "Delete" + REJECT + " archives"),
    "context": ("Error mentions timeout", "Logs live under var"),
}
# Target: one repair line per slot, each holding NO_SOURCE.
REPAIRS = {
    "goal": "Restated primary objective",
    "constraints": "Hard limits apply",
    "progress": "Tallied finished work",
    "decisions": "Design choices logged",
    "next_steps": "Scheduled rollout" + NO_SOURCE,
    "context": "Exact details kept",
}
MONOLITHIC = "Whole summary written once"  # the target's line when no single slot is asked for
DRAFTER_DEFAULT = "Fallback" + REJECT_DEFAULT + " sentence"  # default schema: rejected, then repaired

DRAFTER = Script(lines={MARKERS[s]: DRAFTS[s] for s in MARKERS}, default=(DRAFTER_DEFAULT,))
TARGET = Script(lines={MARKERS[s]: (REPAIRS[s],) for s in MARKERS}, default=(MONOLITHIC,),
                reject_markers=(REJECT, REJECT_DEFAULT, NO_SOURCE))
TARGET_REJECTS_ALL = Script(lines=TARGET.lines, default=TARGET.default, reject_markers=TARGET.reject_markers,
                            positive=("positive", 0.0), negative=("negative", 4.0))
TARGET_NEVER_STOPS = Script(lines=TARGET.lines, default=TARGET.default, reject_markers=TARGET.reject_markers,
                            stops=False)


def drafted() -> set[str]:
    """Every line the drafter writes, as a summary shows it."""
    return written_lines(DRAFTER)


def written() -> set[str]:
    """Every line a scripted model writes (drafts, repairs, the monolithic line)."""
    return drafted() | written_lines(TARGET)
