"""Non-secrets from programming conversations: what an assistant or a user says about code that
names a credential without holding one. The secret scan must store every one of them as it is.

Beside `secret_corpus.FALSE_POSITIVES` (placeholders, identifiers and prose near the rules'
edges), these are the shapes that a secret-named assignment meets in code: file names and paths
(POSIX, Windows, home, relative), code expressions in many languages, placeholders, struct tags,
hashes, ids, versions and URLs without credentials.

Placeholders: markers (`<API_KEY>`, `YOUR_…`, `xxx`, `***`, `…`, `${…}`, `{{ … }}`) and
values made of words (`changeme`, `change-me-in-production`, `secret123`) are not secrets: a
value made of words is either an example or a password that the scan cannot tell from one, and
the scan has never refused those. A random-looking value is refused whatever surrounds it.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

_digest = hashlib.sha256(b"model.safetensors").hexdigest()
_commit = hashlib.sha1(b"fix the login redirect").hexdigest()
_image = hashlib.sha256(b"python:3.12-slim").hexdigest()
_integrity = base64.b64encode(hashlib.sha512(b"left-pad-1.3.0.tgz").digest()).decode()
_uuid = str(uuid.UUID(int=0x9D9AF53BF1A04C2E8B7D1E6F3A2C5B40, version=4))

# The strings of the bug report: refused (`generic_secret`) before the scan knew file names,
# Windows paths and concatenated expressions.
REPORTED: list[str] = [
    "GOOGLE_CLOUD_SPEECH_CREDENTIALS = 'caramel-base-379922-9d9af53bf1a0.json'",
    'GOOGLE_APPLICATION_CREDENTIALS = "C:\\\\Users\\\\me\\\\keys\\\\caramel-base-379922-9d9af53bf1a0.json"',
    '"GOOGLE_API_KEY="+credential.ApiKey',
]

NON_SECRETS: list[str] = [
    *REPORTED,
    # File names and paths: POSIX, Windows, home, relative, dot files.
    "set GOOGLE_APPLICATION_CREDENTIALS=C:\\Users\\me\\keys\\caramel-base-379922-9d9af53bf1a0.json",
    '$env:GOOGLE_APPLICATION_CREDENTIALS="C:\\Users\\me\\Downloads\\my-project-4f1c2a9b7e3d.json"',
    "export GOOGLE_APPLICATION_CREDENTIALS=/home/me/.config/gcloud/application_default_credentials.json",
    "private_key = ~/.ssh/id_rsa",
    "token_file: ./secrets/token.txt",
    "API_TOKEN=./secrets/token.txt",
    "firebase_credentials = 'myapp-firebase-adminsdk-x7k2p-3f9a1c7e5b.json'",
    'APNS_AUTH_KEY = "AuthKey_ABC123DEFG.p8"',
    'tls_private_key = "certs/tls-4e2b9d7c1a.key"',
    "auth_token: .\\tokens\\bot-5c8d2e1f.txt",
    '"keyFile": "..\\\\certs\\\\server-7f3e9a1b.pfx"',
    "credentials: C:/Users/me/AppData/Roaming/gcloud/legacy_credentials/me@example.com/adc.json",
    "api_token = keys/9d9af53bf1a0",
    "SECRET_KEY_FILE=/run/secrets/django_secret_key",
    "ssl_certificate_key /etc/nginx/ssl/api.example.com.key;",
    'client_secret_file = "client_secret_123456789012-abc123def456ghi789jkl012mno345pq'
    '.apps.googleusercontent.com.json"',
    "KEYSTORE_PASSWORD_FILE=~/android/keystore-2f9c8e1ab3.txt",
    "secret: .env.production",
    "AUTH_TOKEN = ~/.config/gh/hosts.yml",
    'GOOGLE_CLOUD_SPEECH_CREDENTIALS = "gs://caramel-base-379922/keys/9d9af53bf1a0.json"',
    # Code: Python.
    'api_key = os.environ["OPENAI_API_KEY"]',
    "token = getToken(user.id)",
    "password = settings.DB_PASSWORD",
    "SECRET_KEY = config('SECRET_KEY')",
    'api_key = f"{API_KEY}"',
    "token = base64.b64decode(encoded_token)",
    "hashed_password = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
    "client_secret = secrets.token_urlsafe(32)",
    "password = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt)",
    'access_token = response.json()["access_token"]',
    'token = request.headers.get("X-Auth-Token")',
    "token = self.s3Client.token",
    # JavaScript and TypeScript.
    "secret: process.env.STRIPE_SECRET,",
    "const auth = `Bearer ${API_TOKEN}`;",
    "apiKey: import.meta.env.VITE_API_KEY",
    'token: localStorage.getItem("auth_token")',
    "password = crypto.randomBytes(32).toString('hex')",
    'const apiToken = tokenStore.getS3Token("prod")',
    'url := "https://speech.example.com/v1?GOOGLE_API_KEY="+credential.ApiKey+"&lang=en"',
    'const query = "?api_key="+apiKeyFromSettings+"&lang=en";',
    'db_url = "postgres://app:"+dbPassword+"@db:5432/app"',
    # Go, Java, C#, Rust, PHP, Ruby.
    'token := os.Getenv("GITHUB_TOKEN")',
    'String token = System.getenv("GITHUB_TOKEN");',
    'var apiKey = Environment.GetEnvironmentVariable("OPENAI_API_KEY");',
    "apiKey = Convert.ToBase64String(hmac.ComputeHash(bytes));",
    "token = Base64.getEncoder().encodeToString(bytes)",
    'let token = std::env::var("GITHUB_TOKEN")?;',
    "$password = $_ENV['DB_PASSWORD'];",
    'password = ENV.fetch("DB_PASSWORD") { "" }',
    "secret = Rails.application.credentials.secret_key_base",
    'Password string `json:"password" yaml:"password"`',
    # Shell, CI, YAML, Terraform, Kubernetes, secret stores.
    "export GITHUB_TOKEN=$(gh auth token)",
    "DB_PASSWORD=$(cat /run/secrets/db_password)",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "token: {{ secrets.GITHUB_TOKEN }}",
    "password: *db_password",
    "password = random_password.db.result",
    'token = data.vault_generic_secret.ci.data["token"]',
    "password: vault:secret/data/prod/db#password",
    "secret: arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-creds-a1B2c3",
    "valueFrom: {secretKeyRef: {name: db-credentials, key: password}}",
    "AZURE_CLIENT_SECRET: $(azureClientSecret)",
    # Placeholders.
    "api_key: <API_KEY_1>",
    "OPENAI_API_KEY=YOUR_API_KEY_HERE",
    'password = "xxx"',
    "token: ***",
    "SECRET_KEY=change-me-in-production",
    "password: changeme",
    "API_KEY=your-api-key",
    # Hashes, ids, versions, URLs without credentials.
    f"sha256sum model.safetensors prints {_digest}",
    f"checksum: sha256:{_digest}",
    f"Fixed in commit {_commit}, see the PR.",
    f"image: python@sha256:{_image}",
    f'"integrity": "sha512-{_integrity}"',
    f'"request_id": "{_uuid}"',
    '"version": "1.2.3-beta.4+build.567"',
    "pip install torch==2.3.0+cu121 --index-url https://download.pytorch.org/whl/cu121",
    "https://storage.googleapis.com/caramel-base-379922/keys/config.json?alt=media",
    "https://github.com/acme/memoryhub/blob/main/config/secrets.example.yaml#L12",
]

# Dicts whose key names a secret and whose value names a file, a path or code.
NON_SECRET_OBJECTS: list[dict] = [
    {"credentials": "C:\\Users\\me\\keys\\caramel-base-379922-9d9af53bf1a0.json"},
    {"GOOGLE_APPLICATION_CREDENTIALS": "/home/me/keys/caramel-base-379922-9d9af53bf1a0.json"},
    {"api_key": "os.environ['OPENAI_API_KEY']"},
    {"token": "getToken(user.id)"},
    {"token": "base64.b64decode(raw)"},
    {"password": "vault:secret/data/prod/db#password"},
]
