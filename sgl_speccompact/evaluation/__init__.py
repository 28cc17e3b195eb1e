"""Retention evaluation: what a compaction keeps of the history, and what it invents.

Pure functions, one idea per module; ``bench/retention.py`` does the I/O.

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

The emulator's scripted reader of these questions is
:mod:`sgl_speccompact.testing.emulator.evaluator`.
"""
