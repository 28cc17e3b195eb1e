"""Secret formats agents print, one fake sample each: ``(name, text, secrets)``.

Shared by the redaction probes of pruning stubs, tool-call argument objects
and returned text.  ``secrets`` are the parts that must never reach a prompt
or come back; a probe also looks for their 8-character pieces, since a cut
secret leaks its head.
"""

from __future__ import annotations

PAT = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefghijklmnopqrstuvwxyzABCDE"

PEM_BODY = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
            "q2uXk5b7d1XQ9x0yqZp4AlmQv3c8dE1nRkT0gH7aF2bL9mN4oP6q",
            "Zk3Jd8sLw0Qa5RtYb2NcVx7MpE1gHu4KoI9fT6lWz3DyXs8BnAeC")
PEM_BLOCK = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *PEM_BODY, "-----END RSA PRIVATE KEY-----"])

SECRET_CASES: list[tuple[str, str, list[str]]] = [
    ("database_url", "DATABASE_URL=postgres://admin:S3cr3tP4ss@db.internal:5432/app", ["S3cr3tP4ss"]),
    ("redis_no_user", "REDIS_URL=redis://:s3cr3tpassw0rd@cache.internal:6379/0", ["s3cr3tpassw0rd"]),
    ("django_secret_key", "SECRET_KEY='django-insecure-9x!k2@q7#zz'", ["django-insecure-9x!k2@q7#zz"]),
    ("django_parens", "SECRET_KEY = 'django-insecure-h5(k^+8#p$w=z)@!r_&-x*2%'",
     ["django-insecure-h5(k^+8#p$w=z)@!r_&-x*2%"]),
    ("django_double_quoted", 'SECRET_KEY = "r8(v+3w!=y^t[q)k@e#n-2*bz&u"', ["r8(v+3w!=y^t[q)k@e#n-2*bz&u"]),
    ("django_leading_percent", "SECRET_KEY='%k2(x8&n)+@9!zq'", ["%k2(x8&n)+@9!zq"]),
    ("django_leading_dollar", "SECRET_KEY='$x9(a&b)c=m+q!'", ["$x9(a&b)c=m+q!"]),
    ("django_leading_at", 'SECRET_KEY="@abc[def]ghi!7"', ["@abc[def]ghi!7"]),
    ("django_env_file", "DJANGO_SECRET_KEY=h5(k^+8#p$w=z)@!r_", ["h5(k^+8#p$w=z"]),
    ("pgpassword", "PGPASSWORD=Tr0ub4dor3 psql -h db -U app", ["Tr0ub4dor3"]),
    ("password_flag", "mysql -u root --password Sup3rS3cret! -e 'select 1'", ["Sup3rS3cret!"]),
    ("json_password", '{"user": "app", "password": "c0rrect-h0rse-battery"}', ["c0rrect-h0rse-battery"]),
    ("authorization_token", "curl -H 'Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b' https://api",
     ["9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"]),
    ("bearer", "Authorization: Bearer abcDEF1234567890ghiJKL.mnoPQR", ["abcDEF1234567890ghiJKL"]),
    ("github_token_hex", "GITHUB_TOKEN=0123456789abcdef0123456789abcdef01234567",
     ["0123456789abcdef0123456789abcdef01234567"]),
    ("github_pat", "export GH=github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdef",
     ["github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdef"]),
    ("ghp", "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", ["ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"]),
    ("openai_key", "OPENAI_API_KEY=sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6", ["sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6"]),
    ("anthropic_key", "key sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2", ["sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"]),
    ("aws_access_key", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", ["AKIAIOSFODNN7EXAMPLE"]),
    ("aws_secret_key", "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]),
    ("google_api_key", "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", ["AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"]),
    ("huggingface_token", "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", ["hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"]),
    ("slack_token", "slack xoxb-1234567890-0987654321-AbCdEfGhIjKl", ["xoxb-1234567890-0987654321-AbCdEfGhIjKl"]),
    ("stripe_key", "stripe sk_test_4eC39HqLyjWDarjtT1zdp7dc", ["sk_test_4eC39HqLyjWDarjtT1zdp7dc"]),
    ("jwt", "id eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwp"
     "MeJf36POk6yJV_adQssw5c end", ["SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"]),
    ("npm_token", "//registry.npmjs.org/:_authToken=npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
     ["npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"]),
    ("yaml_token", "github:\n  user: bob\n  token: Zq8xYb3kLm9PqRsT2\n", ["Zq8xYb3kLm9PqRsT2"]),
    ("netrc", "machine api.heroku.com\n  login me@example.com\n  password c4cd94da15ea0544802c2cfd5ec4ead324327430",
     ["c4cd94da15ea0544802c2cfd5ec4ead324327430"]),
    ("pem_block", PEM_BLOCK, list(PEM_BODY)),
    ("pem_tail", "...\n" + "\n".join(PEM_BODY[:2]) + "\n-----END PRIVATE KEY-----\n", list(PEM_BODY[:2])),
]


def pieces(secret: str, width: int = 8) -> set[str]:
    """Every ``width``-character piece of ``secret`` (the whole secret when shorter).

    >>> sorted(pieces("abcdefghi"))
    ['abcdefgh', 'bcdefghi']
    """
    if len(secret) <= width:
        return {secret}
    return {secret[i:i + width] for i in range(len(secret) - width + 1)}


def leaked(texts, cases=SECRET_CASES) -> list[tuple[str, str]]:
    """``(case name, piece)`` of every secret piece found in any of ``texts``."""
    joined = "\n".join(texts)
    return sorted({(name, p) for name, _, secrets in cases for s in secrets for p in pieces(s) if p in joined})




# (name, text an agent sees, the secrets in it): the formats reported reaching the models' prompts
LISTED_FORMATS = [
    ("sts_secret_first", '{"Credentials": {"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", '
     '"AccessKeyId": "ASIAQWERTYUIOPASDFGH", "SessionToken": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3Qt'
     'MSJHMEUCIQDexampleexampleexample"}}', ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ASIAQWERTYUIOPASDFGH",
                                             "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3Qt"]),
    ("sts_text", "CREDENTIALS\tASIAQWERTYUIOPASDFGH\t2025-01-01T00:00:00Z\twJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
     "\tFwoGZXIvYXdzEBYaDHhBTWExampleSessionTokenValue0123456789abcdef",
     ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "FwoGZXIvYXdzEBYaDHhBTWExampleSessionToken"]),
    ("github_pat", f"export GH={PAT}", [PAT[:40]]),
    ("jwt_signature", "id eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwp"
     "MeJf36POk6yJV_adQssw5c end", ["SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"]),
    ("redis_no_user", "REDIS_URL=redis://:s3cr3tpassw0rd@cache.internal:6379/0", ["s3cr3tpassw0rd"]),
    ("django_secret_key", "SECRET_KEY='django-insecure-9x!k2@q7#zz'", ["django-insecure-9x!k2@q7#zz"]),
    ("pgpassword", "PGPASSWORD=Tr0ub4dor3 psql -h db -U app", ["Tr0ub4dor3"]),
    ("password_flag", "mysql -u root --password Sup3rS3cret! -e 'select 1'", ["Sup3rS3cret!"]),
    ("authorization_token", "curl -H 'Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b' https://api",
     ["9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"]),
    ("github_token_hex", "GITHUB_TOKEN=0123456789abcdef0123456789abcdef01234567",
     ["0123456789abcdef0123456789abcdef01234567"]),
    ("yaml_token", "github:\n  user: bob\n  token: Zq8xYb3kLm9PqRsT2\n", ["Zq8xYb3kLm9PqRsT2"]),
    ("netrc", "machine api.heroku.com\n  login me@example.com\n  password c4cd94da15ea0544802c2cfd5ec4ead324327430",
     ["c4cd94da15ea0544802c2cfd5ec4ead324327430"]),
    ("pem_tail", "...\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
     "q2uXk5b7d1XQ9x0yqZp4AlmQv3c8dE1nRkT0gH7aF2bL9mN4oP6q\n-----END PRIVATE KEY-----\n",
     ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "q2uXk5b7d1XQ9x0yqZp4AlmQv3c8dE1nRkT0gH7aF2bL9mN4oP6q"]),
]


ID_SECRET = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"  # a secret used as a tool-call id


TOOLS_SECRET = "sk-proj-Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6"  # a secret in the tools schema


ALL_SECRETS = [s for _, _, secrets in LISTED_FORMATS for s in secrets] + [ID_SECRET, TOOLS_SECRET]


