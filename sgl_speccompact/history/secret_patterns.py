"""The secret formats redaction knows, as patterns that run in linear time.

Every pattern here is linear in its input: no quantifier repeats a group
whose classes overlap what follows it, and every unbounded run is either
anchored on a literal prefix or preceded by a look-behind that allows one
start per run (``(?<![...])``), so a long run of the run's own class is
scanned once, not once per position.  ``tests/history/test_redaction.py`` times
each pattern on adversarial 100 KB and 1 MB inputs and checks the ratio.

Formats follow the providers' documented token shapes and the public rule
sets of detect-secrets and gitleaks.  Assignments are found by the name
they are assigned to (``SECRET_KEY = '...'``, ``"SessionToken": "..."``,
``token: ...``, ``--password X``), whatever the value looks like.

>>> import re
>>> [k for k, p in PROVIDER_PATTERNS if re.search(p, "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvw")]
['github_token']
>>> bool(re.search(ASSIGNMENT, "PGPASSWORD=hunter22 psql"))
True
>>> bool(re.search(ASSIGNMENT, "max_new_tokens=512"))
False
"""

from __future__ import annotations

import re

# characters of a config key / identifier / flag name
_ID = "A-Za-z0-9_.-"
_KEY_PREFIXES = ("secret", "api", "access", "private", "signing", "encryption", "master", "auth", "account",
                 "app", "client", "service", "license", "session", "webhook")
# names whose value is a secret whatever it looks like: what the name ends with (case-insensitive)
SECRET_NAME_ENDINGS = (
    "password", "passwd", "passphrase", "pwd", "_pass", "-pass", ".pass", "secret", "token",
    *(p + sep + "key" for p in _KEY_PREFIXES for sep in ("", "_", "-", ".")),
)
# the last letter of every ending first: one cheap check rejects most names
_ENDS_SECRET = "(?<=[dstny])(?:" + "|".join(f"(?<={re.escape(e)})" for e in SECRET_NAME_ENDINGS) + ")"
# a value: quoted (up to its quote, spaces allowed) or a bare word
_VALUE = r"""(?:"([^"\r\n]{4,})"|'([^'\r\n]{4,})'|([^\s"'`,;)}\]]{4,}))"""
# NAME = value, NAME: value, "name": "value", name => value (one start per name: possessive name)
ASSIGNMENT = (rf"(?i)(?<![{_ID}])[{_ID}]++{_ENDS_SECRET}[\"']?[ \t]*(?:=>|:=|[:=])[ \t]*{_VALUE}")
# --password X, -token X (a flag and its next word)
FLAG = rf"(?i)(?<![{_ID}])--?[{_ID}]++{_ENDS_SECRET}[ \t]+{_VALUE}"

_B64 = "A-Za-z0-9+/="


def _w(head: str, rest: str) -> str:
    """``head`` (a literal) at a word start, then ``rest``: literal first, so the regex engine
    searches for it with its fast prefix scan; the word-start check is a look-behind after it.

    >>> _w("hf_", "[A-Za-z0-9]{30,}")
    'hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}'
    """
    lit = re.escape(head)
    return f"{lit}(?<![A-Za-z0-9_]{lit}){rest}"
_AWS_ID = r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}"

# (kind, pattern); a pattern with groups redacts its last non-empty group of 4+ characters
PROVIDER_PATTERNS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
                    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"),
    ("jwt", r"(?<![A-Za-z0-9_=-])eyJ[A-Za-z0-9_=-]{4,}\.[A-Za-z0-9_=-]{4,}(?:\.[A-Za-z0-9_+/=-]*)?"),
    ("anthropic_key", _w("sk-ant-", r"[A-Za-z0-9_-]{20,}")),
    ("openai_key", _w("sk-", r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("google_api_key", _w("AIza", r"[0-9A-Za-z_-]{35}")),
    ("google_oauth_secret", _w("GOCSPX-", r"[A-Za-z0-9_-]{28}")),
    ("google_oauth_token", _w("ya29.", r"[0-9A-Za-z_-]{20,}")),
    ("huggingface_token", _w("hf_", r"[A-Za-z0-9]{30,}")),
    ("github_token", _w("github_pat_", r"[A-Za-z0-9_]{22,255}")),
    ("github_token", _w("gh", r"[pousr]_[A-Za-z0-9_]{36,255}")),
    ("aws_secret_key", rf"{_AWS_ID}[\s\S]{{0,100}}?(?<![{_B64}])([A-Za-z0-9/+]{{40}})(?![{_B64}])"),
    ("aws_secret_key", rf"(?<![{_B64}])([A-Za-z0-9/+]{{40}})(?![{_B64}])[\s\S]{{0,100}}?{_AWS_ID}"),
    ("aws_session_token", rf"(?<![{_B64}])(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE|AQoDYXdzE)[{_B64}]{{40,}}"),
    ("azure_client_secret", r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
    ("azure_sas_token", r"(?i)[?&]sig=([A-Za-z0-9%/+=]{20,})"),
    ("npm_token", _w("npm_", r"[A-Za-z0-9]{36}")),
    ("npm_token", r""":_authToken=[ \t]*["']?([^\s"']{8,})"""),
    ("stripe_key", _w("sk_", r"(?:test|live|prod)_[0-9A-Za-z]{10,99}")),
    ("stripe_key", _w("rk_", r"(?:test|live|prod)_[0-9A-Za-z]{10,99}")),
    ("stripe_key", _w("whsec_", r"[A-Za-z0-9]{24,}")),
    ("shopify_token", _w("shp", r"(?:at|ca|pa|ss)_[a-fA-F0-9]{32}")),
    ("digitalocean_token", _w("do", r"[opr]_v1_[a-f0-9]{64}")),
    ("databricks_token", _w("dapi", r"[a-f0-9]{32}(?:-\d)?")),
    ("atlassian_token", _w("ATATT3", r"[A-Za-z0-9_=-]{150,}")),
    ("linear_key", _w("lin_api_", r"[A-Za-z0-9]{40}")),
    ("doppler_token", _w("dp.", r"(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}")),
    ("grafana_token", _w("glc_", r"[A-Za-z0-9+/]{32,400}={0,2}")),
    ("grafana_token", _w("glsa_", r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}")),
    ("postman_key", _w("PMAK-", r"[a-fA-F0-9]{24}-[a-fA-F0-9]{34}")),
    ("pulumi_token", _w("pul-", r"[a-f0-9]{40}")),
    ("vault_token", _w("hv", r"[sb]\.[A-Za-z0-9_-]{24,}")),
    ("sentry_token", _w("sntry", r"[su]_[A-Za-z0-9_+/=]{30,}")),
    ("age_secret_key", _w("AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}")),
    ("newrelic_key", _w("NRAK-", r"[A-Z0-9]{27}")),
    ("flyio_token", _w("fo1_", r"[A-Za-z0-9_-]{43}")),
    ("replicate_token", _w("r8_", r"[A-Za-z0-9]{37}")),
    ("groq_key", _w("gsk_", r"[A-Za-z0-9]{52}")),
    ("xai_key", _w("xai-", r"[A-Za-z0-9]{80}")),
    ("perplexity_key", _w("pplx-", r"[A-Za-z0-9]{48}")),
    ("supabase_token", _w("sbp_", r"[a-f0-9]{40}")),
    ("docker_token", _w("dckr_pat_", r"[A-Za-z0-9_-]{27}")),
    ("terraform_token", r"\.atlasv1\.([A-Za-z0-9_=-]{60,70})"),
    ("notion_token", _w("ntn_", r"[0-9]{11}[A-Za-z0-9]{35}")),
    ("mailgun_key", _w("key-", r"[0-9a-f]{32}\b")),
    ("heroku_token", _w("HRKU-", r"[A-Za-z0-9_-]{60}")),
    ("square_token", _w("EAAA", r"[A-Za-z0-9_-]{60}")),
    ("discord_webhook", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/([A-Za-z0-9_-]{20,})"),
    ("bearer_token", r"(?i)bearer(?<![A-Za-z0-9_]bearer)[ \t]+([A-Za-z0-9._~+/=-]{16,})"),
    ("authorization", r"(?i)authorization(?<![A-Za-z0-9_]authorization)[\"']?[ \t]*[:=][ \t]*[\"']?"
                      r"(?:[A-Za-z][A-Za-z0-9-]*[ \t]+)?([^\s\"']{6,})"),
    # scheme://user:password@host and scheme://:password@host; one start per scheme word
    ("connection_string", r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"']*:([^\s@/\"']+)@"),
    # a list item per line ("- login me" / "- password x") is still one entry
    ("netrc_password", r"(?i)\b(?:machine|login|account|default)\s+(?:\S+\s+)?(?:[-*+>]\s+)?password\s+(\S+)"),
    ("password", ASSIGNMENT),
    ("password", FLAG),
)

# assignment values that are code, references or placeholders, not secrets
NOT_A_SECRET = re.compile(
    r"^(?:os\.|getenv|process\.env|env\[|\$|\{|<|%|@|/|~/|\.\.?/|--|self\.|this\.|settings\.|config\.|args\."
    r"|kwargs|request\.|None$|null$|nil$|true$|false$|undefined$|required$|optional$|\*+$|x+$|\.\.\.|\[REDACTED:"
    r"|(?:password|passwd|secret|token|api_?key|str|string|bool|int)$"
    r"|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+$)",  # an attribute chain: tokenizer.eos_token
    re.IGNORECASE)
CODE_CHARS = "([{"  # a bare value holding one of these after a plain name is an expression: get_token(), data["key"]
# a bare value that calls or indexes a name (letters and underscores, dotted): env("KEY"), os.environ[...
CALL_OR_INDEX = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_]+[(\[]")
# a quoted value is a literal: only a whole placeholder or reference is not a secret (punctuation in a
# quoted value -- a Django key's "(", "$", "%", "@" -- is part of the secret, not code)
QUOTED_PLACEHOLDER = re.compile(
    r"^(?:\$\{[^{}]*\}|\$\{\{.*\}\}|\$[A-Za-z_][A-Za-z0-9_]*|\{\{.*\}\}|\{[A-Za-z_][A-Za-z0-9_.]*\}|<[^<>]*>"
    r"|%\([A-Za-z0-9_]+\)[sdr]|%[A-Za-z_][A-Za-z0-9_]*%|\*+|x+|\.\.\.+|\[REDACTED:[a-z_:]+\]"
    r"|None|null|nil|true|false|undefined|required|optional|change[-_]?me|your[-_ ].*"
    r"|password|passwd|secret|token|api_?key|str|string|bool|int"
    r"|(?:/|~/|\.\.?/)\S*|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)$",
    re.IGNORECASE)
# kinds whose matches pass NOT_A_SECRET before being redacted
CHECKED_KINDS = frozenset({"password", "authorization", "netrc_password"})
