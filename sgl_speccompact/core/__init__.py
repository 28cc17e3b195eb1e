"""The pure core, no I/O: prompts (ours, Hermes's, the judge's), the judgement, lines and entries.

``prompts`` builds the drafter's Figure 5 prompt and the target's shared
prefix, ``hermes_prompt`` Hermes Agent's compressor prompt, ``judge_prompts``
the rubric and questions, ``judge`` turns label logprobs into a verdict,
``lines`` checks proposed lines and budgets, ``admission`` decides each proposed line's next step, ``entries`` splits a summary
into SJC entries, ``outputs`` cleans every returned text (the caller's bytes, secrets
redacted again), ``carried`` reads a previous summary back into slot lines, ``sections``
shares a slot's budget and duplicate check across its sub-section branches;
the cost model: ``costmodel`` (forward-pass times, TP, LoRA), ``specdecode``
(SGLang's speculative decoding), ``gpus`` (shipped GPU profiles),
``calibration`` (fitting it to the user's servers).

May import: ``history`` and the vocabulary.  Must not import: backends,
programs, methods, service, launch; nothing here sends a request.
"""
