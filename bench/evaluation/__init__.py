"""Retention evaluation: what a compaction keeps of the history, and what it invents.

Pure functions, one idea per module; ``bench/retention.py`` does the I/O.

Part of the benchmark lab, not of the wheel.  Its one driver is the retention
benchmark: the measures plant facts into the benchmark's trajectories, ask a
judge model questions through clients built for the benchmark's servers, and
their figures are only meaningful next to the committed benchmark runs.  A
user-facing command scoring the user's own trajectories would need its own
interface (which judge, which probes, what a user's trajectory must carry) and
its own tests; until one exists the package stays with the benchmarks that use
it.

* :mod:`.identifiers`: the deterministic identifier extractor.
* :mod:`.recall`: identifier recall and invention per summary and per slot.
* :mod:`.probes`: planted facts (RULER-style) at chosen depths, checked by
  exact presence and by a question answered from the summary alone.
* :mod:`.adequacy`: the five-criterion adequacy judge (0-5).
* :mod:`.continuation`: the next action from the summary alone against the
  action the agent really took.
* :mod:`.sjc`: what Source-Judged Compaction deleted.
* :mod:`.ask`: the model clients these questions go to (an SGLang backend
  or an OpenAI-compatible URL).
* :mod:`.runner`: every measure for one trajectory (servers passed in as
  callables), and the per-method aggregation.
* :mod:`.frontier`: the quality-latency plot from a latency report.
* :mod:`.evaluator`: a scripted reader of these questions, so the
  evaluation runs on the emulator.

May import: the product and its emulator.  Nothing in the product imports it.
"""
