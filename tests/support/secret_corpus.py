"""Corpora for the secret scanner tests.

True positives are built from a seeded RNG at import: realistic shapes (prefix, alphabet,
length) with random bodies, so the source holds no literal that looks like a live credential
(push protection flags those) and every run tests the same strings.

Each true positive is `(rule, text, secret)`: `text` is what an agent might store, `secret` the
substring that is the credential (where the zero-width variants split it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid

from accounts.keys import generate_key
from memories.ids import new_memory_id, new_ulid

_rng = random.Random(20240607)

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
UPPER_ALNUM = string.ascii_uppercase + string.digits
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def rand(length: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(length))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt() -> str:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": rand(12), "iat": 1717700000}).encode())
    return f"{header}.{payload}.{b64url(_rng.randbytes(32))}"


def _pem(kind: str) -> str:
    body = base64.b64encode(_rng.randbytes(300)).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {kind}-----\n{lines}\n-----END {kind}-----"


def _uuid() -> str:
    return str(uuid.UUID(int=_rng.getrandbits(128), version=4))


def _tp(rule: str, secret: str, template: str = "{}") -> tuple[str, str, str]:
    return rule, template.format(secret), secret


_url_pw = rand(18)
_redis_pw = rand(24)
_putty = (
    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\n"
    f"Public-Lines: 2\n{rand(64, B64)}\n{rand(12, B64)}\nPrivate-Lines: 1\n{rand(44, B64)}"
)

TRUE_POSITIVES: list[tuple[str, str, str]] = [
    _tp("ssh_private_key", _pem("OPENSSH PRIVATE KEY"), "deploy key:\n{}\n"),
    _tp("ssh_private_key", _putty),
    _tp("private_key", _pem("RSA PRIVATE KEY"), "cert for the proxy\n{}"),
    _tp("private_key", _pem("PRIVATE KEY")),
    _tp("private_key", _pem("EC PRIVATE KEY"), "key: {}"),
    _tp("private_key", _pem("PGP PRIVATE KEY BLOCK")),
    _tp("private_key", _pem("RSA PRIVATE KEY").replace("\n", "\\n"), '{{"pem": "{}"}}'),
    _tp(
        "private_key",
        _pem("RSA PRIVATE KEY").replace(
            "-----\n", "-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0A1B\n\n", 1
        ),
    ),
    _tp("aws_access_key_id", "AKIA" + rand(16, UPPER_ALNUM), "The deploy user is {} in us-east-1"),
    _tp("aws_access_key_id", "ASIA" + rand(16, UPPER_ALNUM), "temporary creds {},"),
    _tp(
        "aws_secret_access_key",
        rand(40, B64),
        "[default]\naws_access_key_id = ID\naws_secret_access_key = {}\n",
    ),
    _tp("aws_secret_access_key", rand(40, B64), '{{"secretAccessKey": "{}"}}'),
    _tp("github_token", "ghp_" + rand(36), "export GH={}"),
    _tp("github_token", "gho_" + rand(36), "oauth token {} for the app"),
    _tp("github_token", "ghs_" + rand(36)),
    _tp("github_token", "ghu_" + rand(36)),
    _tp("github_token", "ghr_" + rand(36)),
    _tp("github_pat", "github_pat_" + rand(22) + "_" + rand(59), "use {} to push"),
    _tp("gitlab_token", "glpat-" + rand(20, B64URL), "CI uses {}"),
    _tp(
        "slack_webhook",
        f"https://hooks.slack.com/services/T{rand(8, UPPER_ALNUM)}/B{rand(8, UPPER_ALNUM)}/"
        + rand(24),
        "post alerts to {}",
    ),
    _tp(
        "slack_token",
        f"xoxb-{rand(12, '0123456789')}-{rand(13, '0123456789')}-{rand(24)}",
        "bot token {}",
    ),
    _tp("slack_token", f"xoxp-{rand(12, '0123456789')}-{rand(12, '0123456789')}-{rand(32, HEX)}"),
    _tp("stripe_key", "sk_live_" + rand(24), "stripe: {}"),
    _tp("stripe_key", "rk_live_" + rand(24)),
    _tp("stripe_key", "sk_test_" + rand(24), "test mode key {} (safe-ish)"),
    _tp("stripe_webhook_secret", "whsec_" + rand(32)),
    _tp("anthropic_api_key", "sk-ant-api03-" + rand(93, B64URL) + "AA", "claude key {}"),
    _tp("openai_api_key", "sk-" + rand(48), "OPENAI: {}"),
    _tp("openai_api_key", "sk-proj-" + rand(74, B64URL) + "T3BlbkFJ" + rand(74, B64URL)),
    _tp("google_api_key", "AIza" + rand(35, B64URL), "maps key={}&v=3"),
    _tp("google_oauth_client_secret", "GOCSPX-" + rand(28, B64URL)),
    _tp("jwt", _jwt(), "session cookie was {}"),
    _tp("memoryhub_api_key", generate_key(), "my MemoryHub key is {}"),
    _tp("npm_token", "npm_" + rand(36), "//registry.npmjs.org/:_authToken={}"),
    _tp("pypi_token", "pypi-AgEIcHlwaS5vcmc" + rand(150, B64URL), "twine upload -p {}"),
    _tp("twilio_api_key", "SK" + rand(32, HEX), "twilio {}"),
    _tp("twilio_api_key", "AC" + rand(32, HEX), "account {} sends SMS"),
    _tp("sendgrid_api_key", f"SG.{rand(22, B64URL)}.{rand(43, B64URL)}"),
    _tp("mailgun_api_key", "key-" + rand(32, HEX), "mailgun {}"),
    _tp("heroku_api_key", "HRKU-AA" + rand(58, B64URL)),
    _tp("heroku_api_key", _uuid(), "HEROKU_API_KEY={}"),
    _tp("digitalocean_token", "dop_v1_" + rand(64, HEX), "doctl auth init -t {}"),
    _tp("huggingface_token", "hf_" + rand(34, string.ascii_letters), "HF: {}"),
    _tp(
        "azure_connection_string",
        rand(86, B64) + "==",
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={};EndpointSuffix=core",
    ),
    _tp(
        "azure_connection_string",
        rand(43, B64) + "=",
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={}",
    ),
    _tp(
        "discord_bot_token",
        "MT" + rand(24, B64URL) + "." + rand(6, B64URL) + "." + rand(38, B64URL),
        "discord bot {}",
    ),
    _tp(
        "discord_webhook",
        f"https://discord.com/api/webhooks/{rand(18, '0123456789')}/{rand(68, B64URL)}",
    ),
    _tp(
        "telegram_bot_token",
        f"{_rng.randint(10**8, 10**10 - 1)}:AA{rand(33, B64URL)}",
        "telegram bot {} polls",
    ),
    _tp("shopify_token", "shpat_" + rand(32, HEX)),
    _tp("square_token", "sq0atp-" + rand(22, B64URL)),
    _tp("square_token", "EAAA" + rand(60, B64URL), "square prod {}"),
    _tp("atlassian_api_token", "ATATT3" + rand(186, B64URL), "jira: {}"),
    _tp("databricks_token", "dapi" + rand(32, HEX), "databricks {}"),
    _tp("groq_api_key", "gsk_" + rand(52)),
    _tp("hashicorp_vault_token", "hvs." + rand(90, B64URL), "VAULT_TOKEN {}"),
    _tp("linear_api_key", "lin_api_" + rand(40)),
    _tp("postman_api_key", f"PMAK-{rand(24, HEX)}-{rand(34, HEX)}"),
    _tp("age_secret_key", "AGE-SECRET-KEY-1" + rand(58, BECH32)),
    _tp("url_password", _url_pw, "DATABASE_URL=postgres://app:{}@db.internal:5432/memoryhub"),
    _tp("url_password", _redis_pw, "cache at redis://:{}@cache:6379/0"),
    _tp("url_password", "Tr0ub4dor&3", "mongo: mongodb+srv://admin:{}@cluster0.mongodb.net/"),
    _tp("url_password", "Pässwörd-" + rand(6), "Datenbank: postgres://app:{}@db.intern/app"),
    _tp("generic_secret", rand(32), "api_key = '{}'"),
    _tp("generic_secret", rand(40, B64URL), '{{"client_secret": "{}"}}'),
    _tp("generic_secret", rand(20, ALNUM + "!#%&*"), "DB_PASSWORD={}"),
    _tp("generic_secret", rand(32, HEX), "token: {}"),
    _tp("generic_secret", rand(48, B64URL), "Authorization: Bearer {}"),
    _tp("generic_secret", "P@ssw0rd-" + rand(6), "my password: {}"),
    _tp("generic_secret", rand(24), "$ mycli --password={} --user admin"),
    _tp("generic_secret", rand(30), "webhookSecret => '{}'"),
    _tp("bearer_token", rand(40, B64URL), "curl -H 'X-Auth: Bearer {}' https://api.acme.test"),
]

# A private-key PEM header is a secret on its own, whatever follows it. A generator
# of its own, so these cases leave every value drawn from `_rng` above unchanged.
_pem_rng = random.Random(1421)


def _b64(length: int) -> str:
    return "".join(_pem_rng.choice(B64) for _ in range(length))


TRUE_POSITIVES += [
    # Cut short after its first characters, or after 36 (the old rule wanted 40).
    _tp("private_key", "-----BEGIN RSA PRIVATE KEY-----", "{}\nMIIEow..."),
    _tp("private_key", "-----BEGIN RSA PRIVATE KEY-----", "{}\n" + _b64(36)),
    _tp("private_key", "-----BEGIN RSA PRIVATE KEY-----", "{}\n\n" + _b64(36)),
    # The header alone, of every kind; its body elided; inside JSON.
    _tp("private_key", "-----BEGIN RSA PRIVATE KEY-----"),
    _tp("private_key", "-----BEGIN EC PRIVATE KEY-----", "the key starts {} and I lost the rest"),
    _tp("private_key", "-----BEGIN DSA PRIVATE KEY-----"),
    _tp("private_key", "-----BEGIN ENCRYPTED PRIVATE KEY-----", "key.pem: {}"),
    _tp("private_key", "-----BEGIN PRIVATE KEY-----"),
    _tp("private_key", "-----BEGIN PGP PRIVATE KEY BLOCK-----", "{}\nVersion: GnuPG v2\n"),
    _tp("private_key", "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----", "{}\nComment: deploy"),
    _tp("private_key", "-----BEGIN RSA PRIVATE KEY-----", "{} ... -----END RSA PRIVATE KEY-----"),
    _tp("private_key", "-----BEGIN EC PRIVATE KEY-----", '{{"pem": "{}\\nMHcCAQEE"}}'),
    _tp("ssh_private_key", "-----BEGIN OPENSSH PRIVATE KEY-----"),
    _tp(
        "ssh_private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "The file should start with {} and never be committed.",
    ),
]

# Real secrets beside what is not one: a file name, a path, a secret store's reference or
# code on the same line or the next must not hide them. A generator of its own, as above.
_near_rng = random.Random(4404)


def _near(length: int, alphabet: str = ALNUM) -> str:
    return "".join(_near_rng.choice(alphabet) for _ in range(length))


_CREDENTIALS_PATH = "C:\\Users\\me\\keys\\caramel-base-379922-9d9af53bf1a0.json"
TRUE_POSITIVES += [
    _tp("generic_secret", _near(32), "key_file = 'creds.json'; api_key = '{}'"),
    _tp(
        "generic_secret",
        "hunter2" + _near(3) + "#" + _near(5),
        f'GOOGLE_APPLICATION_CREDENTIALS = "{_CREDENTIALS_PATH}"\nDB_PASSWORD = "{{}}"',
    ),
    _tp("generic_secret", _near(24, B64URL), "token = getToken(user.id)  # it was token = '{}'"),
    _tp(
        "stripe_key",
        "sk_live_" + _near(24),
        'api_key = os.environ["STRIPE_KEY"]  # fallback {}',
    ),
    _tp("generic_secret", _near(40, B64URL), "password: vault:secret/data/db#password\ntoken: {}"),
    # base64 holds `/`; a key with one is not a path
    _tp("generic_secret", _near(12, B64) + "/" + _near(27, B64), "client_secret = {}"),
    # a random value with a dotted tail, or named like a file, is still a random value
    _tp("generic_secret", _near(24) + "." + _near(6), "SECRET = '{}'"),
    _tp("generic_secret", _near(28) + ".json", "private_key = '{}'"),
    _tp("generic_secret", _near(20), "credentials = ~/.aws/credentials; aws_session_token={}"),
]

ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u200e", "\u2060", "\u2063", "\ufeff", "\u00ad")
ZERO_WIDTH += ("\u180e", "\u2064", "\u200f", "\u202c")


def zero_width_split(text: str, secret: str) -> str:
    """`text` with invisible characters sprinkled through `secret` (every 3rd character)."""
    chars = []
    for index, char in enumerate(secret):
        chars.append(char)
        if index % 3 == 2:
            chars.append(ZERO_WIDTH[index % len(ZERO_WIDTH)])
    return text.replace(secret, "".join(chars))


def full_width(text: str) -> str:
    """`text` typed in full-width forms (NFKC folds them back to ASCII)."""
    return "".join(
        chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else "\u3000" if ch == " " else ch for ch in text
    )


_digest_source = b"The quick brown fox jumps over the lazy dog"
_prose_b64 = base64.b64encode(
    b"Meeting notes: the quarterly review moved to Thursday afternoon."
).decode()
_image_b64 = base64.b64encode(_rng.randbytes(600)).decode()

FALSE_POSITIVES: list[str] = [
    # Placeholders and documentation examples.
    "sk-...",
    "export OPENAI_API_KEY=sk-...",
    "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "sk-your-key-here-please-replace-it-with-yours",
    "YOUR_API_KEY",
    "api_key=YOUR_API_KEY",
    "Set api_key: <your-api-key> in the config",
    "<token>",
    "token=<token>",
    "Authorization: Bearer <token>",
    "Authorization: Bearer YOUR_ACCESS_TOKEN",
    "xxxx",
    "token: xxxxxxxxxxxxxxxxxxxxxxxx",
    "password=changeme",
    "password=hunter2",
    "password: ********",
    "password = '...'",
    "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "AKIAIOSFODNN7EXAMPLE is the documented sample access key id",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "xoxb-your-token",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "DATABASE_URL=postgres://user:password@localhost:5432/app",
    "https://admin:***@internal.example",
    "postgres://app:<password>@db:5432/app",
    "mysql://root:${PASS}@db/app",
    "redis://:{password}@cache:6379",
    "amqp://guest:$RABBIT_PASSWORD@queue",
    "api_key: ${API_KEY}",
    "password: {{ vault_db_password }}",
    "token = os.environ['GITHUB_TOKEN']",
    "api_key = os.getenv('OPENAI_API_KEY')",
    "password=settings.DATABASE_PASSWORD",
    "SECRET_KEY = env('DJANGO_SECRET_KEY')",
    "client_secret: see 1Password entry 'Acme OAuth'",
    # PEM blocks that hold no private key, and prose about private keys.
    f"-----BEGIN PUBLIC KEY-----\n{_b64(64)}\n{_b64(64)}\n-----END PUBLIC KEY-----",
    f"-----BEGIN RSA PUBLIC KEY-----\n{_b64(64)}\n-----END RSA PUBLIC KEY-----",
    f"-----BEGIN CERTIFICATE-----\n{_b64(64)}\n{_b64(64)}\n-----END CERTIFICATE-----",
    f"-----BEGIN CERTIFICATE REQUEST-----\n{_b64(64)}\n-----END CERTIFICATE REQUEST-----",
    f"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n{_b64(64)}\n-----END PGP PUBLIC KEY BLOCK-----",
    f"-----BEGIN PGP SIGNATURE-----\n\n{_b64(64)}\n-----END PGP SIGNATURE-----",
    "-----BEGIN OPENSSH PUBLIC KEY-----",
    "-----BEGIN X509 CRL-----",
    "the block closes with -----END RSA PRIVATE KEY-----",
    "A PEM private key starts with BEGIN PRIVATE KEY between dashes; keep it off the wiki.",
    "Put the PRIVATE KEY file in the vault, never in chat.",
    "-----BEGIN NOTES----- private key rotation is on Friday -----END NOTES-----",
    # Identifiers that are not secrets.
    str(uuid.UUID(int=_rng.getrandbits(128), version=4)),
    f"request id {uuid.UUID(int=_rng.getrandbits(128), version=4)} failed at 10:42",
    hashlib.sha1(_digest_source).hexdigest(),
    f"sha256 {hashlib.sha256(_digest_source).hexdigest()}",
    f"image digest sha256:{hashlib.sha256(b'image').hexdigest()}",
    f"commit {hashlib.sha1(b'commit').hexdigest()} fixed the login bug",
    f"merged in {hashlib.sha1(b'short').hexdigest()[:7]}",
    f"md5 {hashlib.md5(_digest_source).hexdigest()}",
    new_ulid(),
    new_memory_id(),
    f"see {new_memory_id()} and {new_memory_id()}",
    "mh_3kT9xQ2a is the key's lookup prefix",
    "arn:aws:iam::123456789012:role/DeployRole",
    "Slack channel C024BE91L, user U012AB3CD",
    "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa",
    "#ff00aa and #00ffcc are the brand colours",
    "docker pull python:3.12-slim-bookworm",
    "version 2.13.0+cpu, model gpt-4o-mini-2024-07-18",
    # Base64 of ordinary text and data, in prose.
    f"The header value was {_prose_b64} (base64 of the meeting notes).",
    f"data:image/png;base64,{_image_b64}",
    # Prose about passwords, tokens and keys.
    "reset my password tomorrow",
    "the token ring network was replaced by Ethernet",
    "Remember: the password policy requires 12 characters and a symbol.",
    "She keeps her secret recipe for Sachertorte in the top drawer.",
    "API key rotation is due next week; ask Dana for the new one.",
    "tokens: 4096",
    "max_tokens: 4096, temperature: 0.2",
    "token_count: 123456789012",
    "password_hint: name of the first pet",
    "The secretary's password manager is 1Password.",
    "credentials: stored in the team vault",
    "Authorization: pending-manager-approval-2024",
    "key: user.preferences.timezone",
    "He was the bearer of bad news about the deadline.",
    "Bearer tokens expire after 3600 seconds.",
    "The user prefers dark mode and lives in Europe/Berlin.",
    "secret: the surprise party is on Friday",
    "passwords must never be stored in memories",
    "pwd: /home/alice/projects/memoryhub",
    "token_expiry: 2026-11-22T02:24:58Z",
    # URLs without credentials.
    "https://example.com/path?q=1&page=2#section",
    "https://docs.python.org/3/library/re.html#re.Pattern.search",
    "http://localhost:8000/api/v1/memories?limit=50&cursor=abc",
    "ssh://git@github.com/acme/memoryhub.git",
    "git@github.com:acme/memoryhub.git",
    "http://[::1]:8080/healthz",
    "https://alice@dev.azure.com/acme/project",
    "http://10.0.0.5:5432/",
    # Emails, phone numbers, dates, paths, long words.
    "alice.smith+newsletter@example.co.uk",
    "ops-team@memoryhub.example",
    "Call +1 (415) 555-0134 or +49 30 1234567",
    "2026-11-22T02:24:58.123456+00:00",
    "/var/lib/postgresql/16/main/pg_wal/000000010000000000000001",
    "C:\\Users\\Alice\\AppData\\Local\\Temp",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "Donaudampfschifffahrtsgesellschaftskapitänswitwe",
    "antidisestablishmentarianism and floccinaucinihilipilification",
    "supercalifragilisticexpialidocious" * 3,
    "AbstractSingletonProxyFactoryBean",
    "internationalization-localization-accessibility-guidelines",
    "tasks/skill-management-dashboard-for-enterprise-customers",
    "risk-assessment-for-the-quarterly-planning-meeting-2025",
]

# Dicts whose key names a secret but whose value is not one.
FALSE_POSITIVE_OBJECTS: list[dict] = [
    {"password": "hunter2"},
    {"password": "changeme"},
    {"token": "abc"},
    {"api_key": "YOUR_API_KEY"},
    {"key": "user.timezone", "value": "Europe/Berlin"},
    {"password_hint": "first pet, then year 1999"},
    {"tokens": 123456789, "secret": True, "credentials": None, "ratio": 0.25},
    {"client_secret": "${CLIENT_SECRET}"},
    {"db": {"password": "settings.DATABASE_PASSWORD"}},
    {"passphrase": "correct horse battery staple"},
]
