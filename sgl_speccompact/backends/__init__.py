"""Where the servers are spoken to: SGLang endpoints and what shapes their requests.

``endpoint`` is :class:`SpecCompactEndpoint` (one-request judgement, LoRA,
token ids, chat template), ``http`` its HTTP transport, ``token_ids`` the
prompt-as-ids cache, ``chat_format``/``chat_render`` the chat template,
``layout`` the agent-aligned target prefix, ``plain_select`` sglang's
two-request select, ``router`` the sglang-router client,
``calibration_probe`` times passes on the user's servers for the cost model.

May import: ``core``, ``history`` and the vocabulary.  Must not import:
programs, methods, service, launch.
"""
