"""Redaction runs in linear time, and covers the formats agents really print.

The timing test is a ratio measured in one run (200 KB against 20 KB of the
same adversarial text), never a wall-clock limit: a quadratic pattern takes
about 100x longer on 10x the input, a linear one about 10x.  At these sizes
a quadratic pattern is already far past the bound (``a*b`` over runs of
``a``: 112x), and the run takes a fifth of what 1 MB against 100 KB took.
"""

from __future__ import annotations

import re
import time

import pytest

from sgl_speccompact.history.redaction import detectors, find_secrets, redact

# units repeated into adversarial texts: runs of the classes the patterns scan, their prefixes
# and separators without the part that would complete a match
UNITS = (
    "a.a.", "a", "A1", "aA0_-", "0-", " ", "\n", "=", "/", "a:", "a@", ":a@", "x://", "a://", "+", "%",
    "sk-", "sk-ant-", "eyJ", "eyJa.", "eyJab.eyJab.", "hf_", "ghp_", "github_pat_", "xoxb-1-", "AIza",
    "AKIA" + "A" * 16, "AKIA" + "A" * 16 + " ", "Q" * 40 + " ", "IQoJb3JpZ2luX2Vj", "1234567890:",
    "-----BEGIN ", "-----BEGIN A ", "-----BEGIN RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----\n",
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0MTIzNDU2Nzg5MDEyMzQ1Njc4OTAx\n", "QUJD-",
    "password", "password ", "password=", "a_password", "--password ", "_TOKEN", "token: ", "SecretKey",
    '"SecretAccessKey": "', "Authorization: ", "authorization: Token ", "bearer ", "login a password ",
    "machine ", "://a:", "//", ":_authToken=", "?sig=", "1Q~", "aaa1Q~", "key-", "dp.pt.", ".atlasv1.",
    "https://discord.com/api/webhooks/1/", "AccountKey=", "https://hooks.slack.com/services/T",
)
SMALL, LARGE = 20_000, 200_000
MAX_RATIO = 15.0  # "about 12x": a linear scan measures 10x give or take cache and load; a quadratic one ~100x


def _text(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _seconds(spans, text: str, min_total_s: float) -> float:
    """CPU time of one scan on this thread (other processes' load does not count): the best of
    scans repeated until ``min_total_s`` has passed."""
    best, spent = float("inf"), 0.0
    while spent < min_total_s or best == float("inf"):
        t0 = time.thread_time()
        for _ in spans(text):
            pass
        took = time.thread_time() - t0
        best, spent = min(best, took), spent + took
    return best


def _ratio(spans, unit: str, careful: bool) -> float:
    small, large = _text(unit, SMALL), _text(unit, LARGE)
    floor = 0.1 if careful else 0.0  # a second, careful look (best of 0.1-0.3 s of scans) only when the quick one looks bad
    return _seconds(spans, large, floor * 3) / max(_seconds(spans, small, floor), 1e-7)


_REFERENCE = re.compile("\x00\x01")  # a literal never found: a scan as fast as memory allows


def _allowed(unit: str) -> float:
    """MAX_RATIO, widened by how much worse than 10x a plain linear scan of the same texts did
    in this run (the small text fits in a cache that the large one does not; fast scans feel it most)."""
    reference = _ratio(lambda t: _REFERENCE.finditer(t), unit, careful=True)
    return MAX_RATIO * max(1.0, reference / 10)


@pytest.mark.perf
@pytest.mark.parametrize("index", range(len(detectors())), ids=lambda i: f"{detectors()[i].kind}-{i}")
def test_every_detector_is_linear_on_adversarial_inputs(index):
    det = detectors()[index]
    slow = {}
    for unit in UNITS:
        ratio = _ratio(det.spans, unit, careful=False)
        for _ in range(2):  # a quadratic pattern is ~100x every time; load on a shared machine is not
            if ratio > MAX_RATIO:
                ratio = min(ratio, _ratio(det.spans, unit, careful=True) * MAX_RATIO / _allowed(unit))
        if ratio > MAX_RATIO:
            slow[unit] = round(ratio, 1)
    assert not slow, f"{det.kind} ({det.name[:80]}): {LARGE // 1000} KB / {SMALL // 1000} KB time ratios {slow}"


# one sample per provider format (fake values in each provider's documented shape)
PROVIDER_SAMPLES = {
    "github_token": "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdef",
    "gitlab_token": "glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn",
    "anthropic_key": "sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2",
    "openai_key": "sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6",
    "google_api_key": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "google_oauth_secret": "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",
    "google_oauth_token": "ya29.a0AfH6SMBx1y2z3A4b5C6d7E8f9G0h",
    "huggingface_token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "aws_session_token": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDexampleexampleexample01234",
    "azure_client_secret": "abc1Q~Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv",
    "npm_token": "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "stripe_key": "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "slack_token": "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
    "shopify_token": "shpat_0123456789abcdef0123456789abcdef",
    "digitalocean_token": "dop_v1_" + "a1" * 32,
    "databricks_token": "dapi0123456789abcdef0123456789abcdef",
    "linear_key": "lin_api_" + "Ab1" * 13 + "C",
    "postman_key": "PMAK-0123456789abcdef01234567-0123456789abcdef0123456789abcdef01",
    "pulumi_token": "pul-" + "0123456789" * 4,
    "vault_token": "hvs.CAESIAbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "sentry_token": "sntrys_eyJpYXQiOjE2ODQ4MjE2NzYuNTAwODMz",
    "newrelic_key": "NRAK-ABCDEFGHIJ0123456789ABCDEFG",
    "groq_key": "gsk_" + "Ab1" * 17 + "C",
    "docker_token": "dckr_pat_Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9",
    "sendgrid_key": "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",
    "telegram_token": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8",
    "age_secret_key": "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "QPZRY9X8GF2TVDW0S3JN54KHCE",
}


@pytest.mark.parametrize("kind", sorted(PROVIDER_SAMPLES))
def test_provider_formats_are_redacted(kind):
    secret = PROVIDER_SAMPLES[kind]
    text, counts = redact(f"the key is {secret} (do not share)")
    assert secret not in text and counts == {kind: 1}, (text, counts)
    assert text.startswith("the key is [REDACTED:") and text.endswith("] (do not share)")


@pytest.mark.parametrize("line", [
    "password = os.environ['DB_PASSWORD']", "token = tokenizer.eos_token", "api_key = settings.API_KEY",
    "token = get_token(user)", 'secret = data["secret"]', "self.token = token", "max_new_tokens=512",
    "password: <your password>", "GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}", "password_file=/run/secrets/db",
    "num_tokens: 1024 total", "def check_password(pw): ...", "tokenizer = AutoTokenizer.from_pretrained(p)",
    "Enter password: ", "commit 3f2a9c1d4e5b6a7f8e9d0c1b2a3f4e5d6c7b8a9f", "PWD=/home/ada/project",
    "git push --no-password --verbose",
])
def test_code_references_and_placeholders_are_kept(line):
    assert find_secrets(line) == [], line
