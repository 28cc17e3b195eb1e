"""What a fake ``run_method`` records of a call: the request's options by their keyword names.

The CLI and the service pass one :class:`~sgl_speccompact.methods.request.MethodRequest`
as ``messages``; the fakes spell it out (``on_event`` always, the other options only when given), so their tests assert
on ``messages``, ``focus``, ``tools``, ``layout``, ... as they would of keywords.
"""

from sgl_speccompact.methods.request import as_request


def call_fields(messages, previous_summary=None, source_judge=False, **kw) -> dict:
    """``messages`` (a list or a request) and the keywords of one call, as one dict."""
    request = as_request(messages, previous_summary=previous_summary, source_judge=source_judge)
    layout = request.layout
    given = {"schema": request.schema, "focus": request.focus, "layout": layout.name,
             "tools": layout.tools, "chat_template": layout.chat_template,
             "chat_template_kwargs": layout.chat_template_kwargs}
    return {"messages": request.messages, "previous_summary": request.previous_summary,
            "source_judge": request.source_judge, "on_event": request.on_event,
            **{k: v for k, v in given.items() if v is not None}, **kw}
