"""An in-process SpecCompactEndpoint (no HTTP) and the checks SGLang runs on a /generate body."""

from __future__ import annotations

import math
import threading
from sglang.srt.entrypoints.api_contract import generate_contract_error
from sglang.srt.managers.io_struct import GenerateReqInput
from sgl_speccompact.backends.endpoint import SpecCompactEndpoint
from sgl_speccompact.backends.http import http_error
from sgl_speccompact.core.judge import label_choices
from tests.support.scripted import LINE_RE

VOCAB = {"positive": 101, " positive": 102, "Positive": 103, "negative": 201, " negative": 202}
UNLISTED = 1e-9  # probability of any requested id the distribution leaves out


def assert_server_accepts(body: dict) -> None:
    """The checks sglang's /generate route runs before serving a body."""
    assert generate_contract_error(body) is None, generate_contract_error(body)
    GenerateReqInput(**body).normalize_batch_and_arguments()


def body_text(body: dict):
    """A body's prompt as text: ``text``, or ``input_ids`` decoded (the fake tokenizer: one id per char)."""
    if "text" in body:
        return body["text"]
    ids = body["input_ids"]
    if ids and isinstance(ids[0], list):
        return ["".join(map(chr, x)) for x in ids]
    return "".join(map(chr, ids))


def label_dist(p: float) -> dict[int, float]:
    """The in-process target's next-token distribution on the label variants for ratio ``p``."""
    small = math.exp(-3)
    return {101: p, 102: p * small, 103: p * small, 201: 1 - p, 202: (1 - p) * small}


class InProcessEndpoint(SpecCompactEndpoint):
    """The real endpoint with its HTTP transport answered in-process.

    Its judge has one next-token distribution per line, ``dist(line) ->
    {token id: p}`` (default: ``label_dist(judge(line))``), and answers both
    judge paths from it: the one-request body (``token_ids_logprob``, top-k)
    and sglang's plain select (each ``prompt + choice`` scored token by
    token; a variant outside ``VOCAB`` is several char tokens).
    ``honours_ids=False`` plays a server that ignores ``token_ids_logprob``.
    """

    def __init__(self, *, model="Qwen/Qwen3-8B", model_type="qwen3", judge=lambda line: 0.9, repair="- repaired",
                 dist=None, honours_ids=True, top_k=True, **kw):
        self.bodies, self.judge, self.repair = [], judge, repair
        self.dist = dist or (lambda line: label_dist(self.judge(line)))
        self.honours_ids, self.top_k = honours_ids, top_k
        self.lock = threading.Lock()
        self.model, self.model_type = model, model_type
        super().__init__("http://in-process", **kw)

    def _request(self, method, path, body=None):
        if path == "/get_model_info":  # what sglang reports from the checkpoint's config.json
            return {"model_path": self.model, "tokenizer_path": self.model, "is_generation": True,
                    "model_type": self.model_type}
        if path == "/tokenize":
            toks = [[VOCAB[p]] if p in VOCAB else [ord(c) for c in p]
                    for p in body["prompt"]]
            return {"tokens": toks, "count": [len(t) for t in toks], "max_model_len": 32768}
        if path != "/generate":  # a route this fake does not serve (sessions, for one): sglang's 404
            raise http_error(self.base_url + path, 404, '{"detail":"Not Found"}')
        with self.lock:
            self.bodies.append(body)
        text = body_text(body)
        if isinstance(text, list):
            return [self._answer({**body, "text": t}, t) for t in text]
        return self._answer(body, text)

    def _answer(self, body, text):
        meta = {"prompt_tokens": len(text), "cached_tokens": 0, "completion_tokens": 0}
        if "token_ids_logprob" in body:
            dist = self.dist(LINE_RE.findall(text)[-1])
            if self.honours_ids:
                meta["output_token_ids_logprobs"] = [[[math.log(dist.get(t, UNLISTED)), t, None]
                                                      for t in body["token_ids_logprob"]]]
            if self.top_k and body.get("top_logprobs_num"):
                top = sorted(dist.items(), key=lambda kv: -kv[1])[:body["top_logprobs_num"]]
                meta["output_top_logprobs"] = [[[math.log(p), t, None] for t, p in top]]
            return {"text": "", "meta_info": meta}
        if body.get("return_logprob") and LINE_RE.search(text):  # sglang's plain select: score prompt + choice
            forms = sorted(label_choices("positive", "negative")[0], key=len, reverse=True)
            form = next(f for f in forms if text.endswith(f))
            dist = self.dist(LINE_RE.findall(text)[-1])
            own = ([(math.log(dist.get(VOCAB[form], UNLISTED)), VOCAB[form], form)] if form in VOCAB
                   else [(math.log(1e-4), ord(c), c) for c in form])
            lps = [[None, 1, "<"], [-0.5, 2, ">"]] + [list(e) for e in own]
            return {"text": "", "meta_info": {**meta, "input_token_logprobs": lps, "output_token_logprobs": []}}
        if body["sampling_params"]["max_new_tokens"] == 0:
            return {"text": "", "meta_info": meta}
        return {"text": self.repair, "meta_info": {**meta, "finish_reason": {"type": "stop", "matched": "\n"}}}


