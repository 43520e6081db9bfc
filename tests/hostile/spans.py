"""Planted secrets and ordinary tool output: what redaction must mask, and what it must leave readable.

`secret_cases()` plants one fake secret per case in the shapes agents really send and receive (config
files, cloud key files, shell commands with JSON in them, HTTP headers, OAuth responses, URLs with
credentials, private-key blocks, JSON inside JSON strings); `ordinary_results()` is tool output with no
secret in it (weather reports, file listings, git output with full hashes, UUID ids, booking
confirmations). `python -m tests.hostile.spans` measures redaction's median cost per call and how
much ordinary content it masks.
"""

from __future__ import annotations

import base64
import json
import random
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["OrdinaryCase", "SecretCase", "leaked", "ordinary_results", "secret_cases", "secret_padded"]

_ALNUM = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@dataclass(frozen=True)
class SecretCase:
    """One planted secret: `payload` is what the agent sends (text or arguments), `secret` what must not leak."""

    name: str
    payload: Any
    secret: str


@dataclass(frozen=True)
class OrdinaryCase:
    """Tool output with no secret in it: `keep` are phrases redaction must leave in place."""

    name: str
    payload: Any
    keep: tuple[str, ...]


def leaked(secret: str, seen: str, prefix: int = 4, window: int = 6) -> str | None:
    """The first run of `window` characters of `secret` past its first `prefix` found in `seen`, else None.

    A secret counts as masked only when nothing of it beyond a few leading characters (``sk_l``,
    ``AKIA``: a shape, not the secret) survives anywhere, so half a token left behind is a leak.
    """
    body = secret[prefix:]
    for start in range(max(1, len(body) - window + 1)):
        piece = body[start:start + window]
        if piece and piece in seen:
            return piece
    return None


def _token(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64(rng: random.Random, n_bytes: int) -> str:
    return base64.b64encode(rng.randbytes(n_bytes)).decode()


def _b64url(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")


def _jwt(rng: random.Random, alg: str = "HS256", sig_len: int = 43) -> tuple[str, str]:
    """A JWT and its part past the (standard, shared) header: claims and signature."""
    header = _b64url({"alg": alg, "typ": "JWT", "kid": rng.randbytes(8).hex()})
    claims = _b64url({"sub": str(rng.getrandbits(40)), "iss": "https://auth.example.com/", "exp": 1767225600,
                      "email": f"u{rng.getrandbits(20)}@example.com"})
    tail = f"{claims}.{_token(rng, sig_len, _B64URL)}"
    return f"{header}.{tail}", tail


def _pem_body(rng: random.Random, n_bytes: int) -> list[str]:
    body = _b64(rng, n_bytes)
    return [body[i:i + 64] for i in range(0, len(body), 64)]


def _gcp_key_file(rng: random.Random) -> tuple[str, str, str]:
    """A Google Cloud service-account key file as `gcloud iam service-accounts keys create` writes it."""
    key_id = rng.randbytes(20).hex()
    body = _pem_body(rng, 1190)
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\n"
    project = f"acme-prod-{rng.randrange(100000, 999999)}"
    text = json.dumps({
        "type": "service_account", "project_id": project, "private_key_id": key_id, "private_key": pem,
        "client_email": f"deployer@{project}.iam.gserviceaccount.com", "client_id": str(rng.getrandbits(68)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": "https://oauth2.googleapis.com/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "universe_domain": "googleapis.com"}, indent=2)
    return text, key_id, body[1]


def secret_cases(seed: int = 0) -> list[SecretCase]:
    """Every planted-secret shape, with fresh random secrets for `seed` (fake values, never real keys)."""
    rng = random.Random(seed)
    cases: list[SecretCase] = []

    def add(name: str, payload: Any, secret: str) -> None:
        cases.append(SecretCase(name, payload, secret))

    # -- issue 15's list
    pem_body = "\n".join(_pem_body(rng, 288))
    add("pem_end_cut", {"content": f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n"}, pem_body.splitlines()[3])
    aws_secret = _token(rng, 40, _ALNUM + "/+")
    add("aws_secret_access_key", f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        f"aws_secret_access_key = {aws_secret}\nregion = eu-west-1", aws_secret)
    basic = base64.b64encode(f"admin:{_token(rng, 12)}".encode()).decode()
    add("authorization_basic", f"curl -H 'Authorization: Basic {basic}' https://api.example.com/v1/me", basic)
    url_pw = _token(rng, 14)
    add("url_credentials", f"git clone https://deploy:{url_pw}@git.example.com/team/repo.git", url_pw)
    mysql_pw = _token(rng, 12)
    add("mysql_p", {"command": f"mysql -uroot -p{mysql_pw} -h db prod < dump.sql"}, mysql_pw)
    flag_pw = _token(rng, 13)
    add("password_flag", {"command": f"tool login --password {flag_pw} --user x"}, flag_pw)
    jwt, jwt_tail = _jwt(rng)
    add("jwt_in_cookie", f"token in cookie: session={jwt}; Path=/", jwt_tail)
    stripe = "sk_live_" + _token(rng, 30)
    add("stripe_live", {"api": stripe}, stripe)
    github_pat = "github_pat_" + _token(rng, 22) + "_" + _token(rng, 59)
    add("github_pat", f"export GH={github_pat}", github_pat)
    google = "AIza" + _token(rng, 35, _B64URL)
    add("google_api_key", f"curl 'https://maps.googleapis.com/maps/api/geocode/json?key={google}&address=Bergen'",
        google)
    short_sk = "sk-" + _token(rng, 12)
    add("short_sk", f"OPENAI={short_sk} python run.py", short_sk)
    project_sk = "sk-proj-" + _token(rng, 48, _B64URL)
    add("project_sk", {"env": f"OPENAI_API_KEY={project_sk}"}, project_sk)
    akia = "AKIA" + _token(rng, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    add("aws_key_id", f"aws sts get-caller-identity # key {akia} used", akia)
    passphrase = _token(rng, 15)
    add("passphrase_key", {"passphrase": passphrase, "path": "id_ed25519"}, passphrase)
    cred = _token(rng, 18)
    add("credentials_key", {"credentials": {"user": "svc", "value": cred}}, cred)
    private_key = _token(rng, 24)
    add("private_key_key", {"private_key": private_key}, private_key)
    words = " ".join(("correct", "horse", _token(rng, 7), "staple"))
    add("multiword_password", f"user: bob\npassword: {words}\nnext: line", words.split(" ", 1)[1])
    plain_pw = _token(rng, 11)
    add("password_assignment", f"password={plain_pw} other=1", plain_pw)

    # -- JWTs
    jwt, jwt_tail = _jwt(rng, "RS256", 342)
    add("jwt_bare_in_text", f"Logged in. Use this token for the next call: {jwt}\nIt expires in 1 hour.", jwt_tail)
    jwt, jwt_tail = _jwt(rng)
    add("oauth_token_response", json.dumps({"access_token": jwt, "token_type": "Bearer", "expires_in": 3599,
                                            "scope": "read write"}), jwt_tail)
    refresh = "1//0" + _token(rng, 99, _B64URL)
    add("refresh_token_dict", {"grant_type": "refresh_token", "refresh_token": refresh, "client_id": "cli-app"},
        refresh)

    # -- passwords inside JSON strings
    hunter = _token(rng, 10)
    add("password_in_json_string", {"config": json.dumps({"password": hunter})}, hunter)
    deep = _token(rng, 16)
    add("json_in_json_in_json", {"job": json.dumps({"spec": json.dumps({"db": {"pass": deep}})})}, deep)
    db_pw = _token(rng, 20)
    add("db_password_in_json_value", {"env": f"DB_HOST=db.internal\nDB_PASSWORD={db_pw}\nDB_PORT=5432"}, db_pw)
    dotenv_pw = _token(rng, 18)
    add("dotenv_quoted", f'DEBUG=false\nDATABASE_PASSWORD="{dotenv_pw}"\nLOG_LEVEL=info\n', dotenv_pw)

    # -- cloud key files and connection strings
    gcp, key_id, key_line = _gcp_key_file(rng)
    add("gcp_service_account_private_key", gcp, key_line)
    gcp, key_id, _ = _gcp_key_file(rng)
    add("gcp_service_account_private_key_id", {"path": "sa.json", "content": gcp}, key_id)
    sts_secret = _token(rng, 40, _ALNUM + "/+")
    add("aws_sts_credentials", json.dumps({"Credentials": {
        "AccessKeyId": "ASIA" + _token(rng, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"), "SecretAccessKey": sts_secret,
        "SessionToken": _b64(rng, 300), "Expiration": "2026-01-01T00:00:00Z"}}, indent=4), sts_secret)
    aws_dict = _token(rng, 40, _ALNUM + "/+")
    add("aws_secret_in_dict", {"aws_access_key_id": "AKIA" + _token(rng, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
                               "aws_secret_access_key": aws_dict, "region_name": "us-east-1"}, aws_dict)
    account_key = _b64(rng, 64)
    add("azure_storage_connection_string", json.dumps({"IsEncrypted": False, "Values": {
        "AzureWebJobsStorage": f"DefaultEndpointsProtocol=https;AccountName=acmefn;AccountKey={account_key};"
                               "EndpointSuffix=core.windows.net", "FUNCTIONS_WORKER_RUNTIME": "python"}}, indent=2),
        account_key)
    sb_key = _b64(rng, 32)
    add("azure_service_bus", f"export SB_CONN='Endpoint=sb://acme.servicebus.windows.net/;"
        f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={sb_key}'", sb_key)
    sas_sig = urllib.parse.quote(_b64(rng, 32), safe="")
    add("azure_sas_url", {"url": f"https://acme.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r"
                                 f"&se=2026-01-01T00:00:00Z&spr=https&sig={sas_sig}"}, sas_sig)
    amz_sig = rng.randbytes(32).hex()
    add("s3_presigned_url", f"Download: https://bucket.s3.amazonaws.com/report.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={amz_sig}", amz_sig)

    # -- JSON inside shell commands
    curl_tok = _token(rng, 32)
    add("curl_json_single_quoted", f"curl -X POST https://api.example.com/login -H 'Content-Type: application/json' "
        f"-d '{{\"user\": \"ops\", \"token\": \"{curl_tok}\"}}'", curl_tok)
    curl_pw = _token(rng, 14)
    add("curl_json_double_quoted", {"command": f'curl -s -d "{{\\"username\\": \\"ops\\", \\"password\\": '
                                               f'\\"{curl_pw}\\"}}" https://api.example.com/session'}, curl_pw)
    heredoc_pw = _token(rng, 17)
    add("heredoc_json", f"cat > creds.json <<'EOF'\n{{\"registry\": \"ghcr.io\", \"password\": \"{heredoc_pw}\"}}\nEOF",
        heredoc_pw)

    # -- dictionary keys and headers
    api_key = _token(rng, 32)
    add("api_key_dict", {"service": "weather", "api_key": api_key, "city": "Oslo"}, api_key)
    client_secret = "GOCSPX-" + _token(rng, 28, _B64URL)
    add("client_secret_dict", {"installed": {"client_id": "4711-abc.apps.googleusercontent.com",
                                             "client_secret": client_secret, "redirect_uris": ["http://localhost"]}},
        client_secret)
    access = "EAAB" + _token(rng, 120)
    add("access_token_query", f"GET https://graph.facebook.com/v19.0/me?fields=id,name&access_token={access}", access)
    bearer = _token(rng, 40, _B64URL)
    add("authorization_header_dict", {"url": "https://api.example.com/v2/orders",
                                      "headers": {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}},
        bearer)
    raw_bearer = _token(rng, 36)
    add("raw_http_request", f"POST /v1/charge HTTP/1.1\r\nHost: pay.example.com\r\nAuthorization: Bearer {raw_bearer}"
        f"\r\nContent-Length: 0\r\n\r\n", raw_bearer)
    x_api = _token(rng, 30)
    add("x_api_key_header", {"headers": {"X-Api-Key": x_api, "User-Agent": "agent/1.0"}}, x_api)
    cookie = _token(rng, 32, "0123456789abcdef")
    add("set_cookie_output", f"HTTP/2 200\ncontent-type: text/html\nset-cookie: sessionid={cookie}; HttpOnly; Path=/",
        cookie)
    pair_pw = _token(rng, 22)
    add("k8s_env_name_value", {"env": [{"name": "DB_USER", "value": "app"},
                                       {"name": "DB_PASSWORD", "value": pair_pw}]}, pair_pw)
    har = _token(rng, 28)
    add("har_header_pairs", {"request": {"headers": [{"name": "Host", "value": "x.example.com"},
                                                     {"name": "X-Auth-Token", "value": har}]}}, har)
    tuple_tok = _token(rng, 26)
    add("header_tuples", {"headers": [["Accept", "*/*"], ["X-Vault-Token", tuple_tok]]}, tuple_tok)
    argv_pw = _token(rng, 15)
    add("argv_list", {"argv": ["docker", "login", "--username", "ci", "--password", argv_pw, "ghcr.io"]}, argv_pw)
    docker_auth = base64.b64encode(f"ci:{_token(rng, 24)}".encode()).decode()
    add("docker_config_auth", json.dumps({"auths": {"ghcr.io": {"auth": docker_auth}}}, indent="\t"), docker_auth)
    npm = "npm_" + _token(rng, 36)
    add("npmrc_auth_token", f"registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken={npm}\n", npm)
    xml_pw = _token(rng, 16)
    add("maven_settings_xml", f"<settings><servers><server><id>nexus</id><username>deploy</username>"
        f"<password>{xml_pw}</password></server></servers></settings>", xml_pw)
    appconfig_pw = _token(rng, 19)
    add("dotnet_app_config", f'<appSettings>\n  <add key="SmtpHost" value="mail.example.com" />\n'
        f'  <add key="SmtpPassword" value="{appconfig_pw}" />\n</appSettings>', appconfig_pw)
    code_key = "rk_live_" + _token(rng, 24)
    add("python_code_literal", {"code": f'import stripe\nstripe.api_key = "{code_key}"\nprint(stripe.Charge.list())'},
        code_key)
    netrc = _token(rng, 36, "0123456789abcdef-")
    add("netrc", f"machine api.heroku.com\n  login ops@example.com\n  password {netrc}\n", netrc)
    env_tok = "ghp_" + _token(rng, 36)
    add("env_listing", f"HOME=/root\nGITHUB_TOKEN={env_tok}\nPATH=/usr/bin:/bin\n", env_tok)

    auth_pw = _token(rng, 14)
    add("python_auth_tuple", {"code": f'r = requests.get(url, auth=("admin", "{auth_pw}"), timeout=5)'}, auth_pw)
    literal_pw = _token(rng, 12)
    add("kubectl_from_literal", f"kubectl create secret generic db --from-literal=username=app "
        f"--from-literal=password={literal_pw}", literal_pw)
    toml_pw = _token(rng, 21)
    add("toml_config", f'[database]\nhost = "db.internal"\npassword = "{toml_pw}"\npool = 5\n', toml_pw)
    compare_pw = _token(rng, 12)
    add("code_comparison", {"patch": f'+    if supplied == "{compare_pw}" or password == "{compare_pw}":'}, compare_pw)

    # -- URLs with credentials
    pg_pw = _token(rng, 18)
    add("postgres_url", {"DATABASE_URL": f"postgresql://app_user:{pg_pw}@db.internal:5432/prod"}, pg_pw)
    mongo_pw = _token(rng, 16)
    add("mongodb_srv_url", f"client = MongoClient('mongodb+srv://admin:{mongo_pw}@cluster0.ab1cd.mongodb.net/"
        f"?retryWrites=true')", mongo_pw)
    redis_pw = _token(rng, 24)
    add("redis_password_only_url", f"REDIS_URL=redis://:{redis_pw}@cache.internal:6379/0", redis_pw)
    gh_app = "ghs_" + _token(rng, 36)
    add("git_remote_token", f"origin\thttps://x-access-token:{gh_app}@github.com/acme/app.git (fetch)", gh_app)
    jdbc_pw = _token(rng, 13)
    add("jdbc_url", {"url": f"jdbc:mysql://db:3306/app?user=app&password={jdbc_pw}&useSSL=true"}, jdbc_pw)

    # -- private key blocks
    openssh = _pem_body(rng, 300)
    add("openssh_private_key", "$ cat ~/.ssh/id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(openssh)
        + "\n-----END OPENSSH PRIVATE KEY-----\n$ ", openssh[1])
    ec = _pem_body(rng, 120)
    add("pem_in_json_string", {"tls": {"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                                       "key": "-----BEGIN EC PRIVATE KEY-----\n" + "\n".join(ec)
                                              + "\n-----END EC PRIVATE KEY-----\n"}}, ec[0])
    tls_key = base64.b64encode(("-----BEGIN PRIVATE KEY-----\n" + _b64(rng, 90)).encode()).decode()
    add("k8s_secret_tls_key", "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\ndata:\n"
        f"  tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\n  tls.key: {tls_key}\n", tls_key[40:])

    # -- SaaS tokens detect-secrets knows
    slack_path = f"T{_token(rng, 8, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}/B{_token(rng, 10, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')}/{_token(rng, 24)}"  # noqa: E501
    add("slack_webhook", {"webhook": "notify", "target": f"https://hooks.slack.com/services/{slack_path}"},
        slack_path.rsplit("/", 1)[1])
    sendgrid = f"SG.{_token(rng, 22, _B64URL)}.{_token(rng, 43, _B64URL)}"
    add("sendgrid_key", f"Using SendGrid key {sendgrid} for outbound mail", sendgrid)
    return cases


def secret_padded(case: SecretCase, size: int) -> str:
    """The case's payload as text buried in `size` characters of ordinary tool output (larger under make fuzz)."""
    text = case.payload if isinstance(case.payload, str) else json.dumps(case.payload)
    filler = "ok: 12 tests passed in 0.4s; nothing to report here\n"
    half = max(0, size // 2 // len(filler))
    return filler * half + text + "\n" + filler * half


def ordinary_results(seed: int = 0) -> list[OrdinaryCase]:
    """Ordinary tool output with no secret in it, and the phrases in it that must stay readable."""
    rng = random.Random(seed)
    sha1 = [rng.randbytes(20).hex() for _ in range(3)]
    sha256 = rng.randbytes(32).hex()
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(3)]
    trace_id = rng.randbytes(16).hex()
    out = [
        OrdinaryCase("weather_report", "Weather for Bergen, NO: light rain, 9°C (feels like 6°C), wind 7 m/s SW, "
                     "humidity 88%, pressure 1009 hPa. Tomorrow: showers, high 11°C, low 6°C.",
                     ("light rain, 9°C", "wind 7 m/s SW", "Tomorrow: showers")),
        OrdinaryCase("weather_json", {"city": "Oslo", "temperature_c": 14.2, "condition": "partly cloudy",
                                      "forecast": [{"day": "Tue", "high": 16, "low": 8, "summary": "sunny"}]},
                     ("partly cloudy", "sunny")),
        OrdinaryCase("file_listing", "total 48\ndrwxr-xr-x  5 dev dev 4096 Mar  3 10:12 .\n"
                     "-rw-r--r--  1 dev dev 1832 Mar  3 10:11 README.md\n"
                     "-rw-r--r--  1 dev dev  912 Mar  3 10:11 password_reset.py\n"
                     "-rw-r--r--  1 dev dev  411 Mar  3 10:11 token_bucket.py\n"
                     "drwxr-xr-x  2 dev dev 4096 Mar  3 10:12 secrets_docs\n",
                     ("password_reset.py", "token_bucket.py", "README.md", "secrets_docs")),
        OrdinaryCase("git_log", f"commit {sha1[0]}\nAuthor: Alice Doe <alice@example.com>\nDate:   Mon Mar 3 10:12 2025\n\n"
                     f"    Fix token counting in the tokenizer\n\ncommit {sha1[1]}\nMerge: {sha1[1][:7]} {sha1[2][:7]}\n"
                     f"Author: Bob <bob@example.com>\n\n    Rotate secrets docs\n",
                     (sha1[0], sha1[1], "Fix token counting", "Author: Alice Doe")),
        OrdinaryCase("git_sha256_json", {"ref": "refs/heads/main", "object": {"sha": sha256, "type": "commit"},
                                         "parents": [sha1[2]]}, (sha256, sha1[2])),
        OrdinaryCase("git_status", "On branch main\nChanges not staged for commit:\n\tmodified:   src/auth/login.py\n"
                     "\tmodified:   config/settings.yaml\n", ("src/auth/login.py", "config/settings.yaml")),
        OrdinaryCase("uuid_ids", {"booking_id": ids[0], "customer_id": ids[1], "session_id": ids[2], "status": "confirmed",
                                  "trace_id": trace_id}, (ids[0], ids[1], ids[2], trace_id)),
        OrdinaryCase("booking_confirmation", f"Booking confirmed. Confirmation code: K7QX2M. Flight LH 1457 Oslo (OSL) -> "
                     f"Frankfurt (FRA), 12 Apr 2025 07:05, seat 14C. Hotel Bristol, 2 nights, $293/night. Ref {ids[0]}.",
                     ("Confirmation code: K7QX2M", "Flight LH 1457", "$293/night", ids[0])),
        OrdinaryCase("booking_json", {"confirmation": "K7QX2M", "passenger": "Ada Lovelace", "fare": "$183",
                                      "pnr": "XK3J9L", "booking_ref": ids[1]}, ("K7QX2M", "XK3J9L", ids[1])),
        OrdinaryCase("pytest_output", "============ test session starts ============\ncollected 42 items\n\n"
                     "tests/test_auth.py ....s.....\ntests/test_token_bucket.py ......\n\n"
                     "======= 41 passed, 1 skipped in 3.21s =======", ("41 passed, 1 skipped", "test_token_bucket.py")),
        OrdinaryCase("llm_usage", {"model": "gpt-4o-mini", "max_tokens": 512, "usage": {"prompt_tokens": 812,
                                   "completion_tokens": 97, "total_tokens": 909}, "tokenizer": "o200k_base"},
                     ("812", "909", "o200k_base")),
        OrdinaryCase("traceback", 'Traceback (most recent call last):\n  File "app/auth.py", line 41, in login\n'
                     "    check_password(user, supplied)\nKeyError: 'password_hash'", ("check_password(user, supplied)",
                                                                                     "app/auth.py", "line 41")),
        OrdinaryCase("arxiv_result", "An Encode-then-Decompose Approach to Unsupervised Time Series Anomaly Detection "
                     "(Buang Zhang, 2510.18998v1) | Maximally Divergent Intervals for Anomaly Detection (Erik Rodner, "
                     "1610.06761v1)", ("2510.18998v1", "Erik Rodner")),
        OrdinaryCase("db_schema", {"table": "users", "primary_key": "id", "columns": ["id", "email", "password_hash"],
                                   "foreign_key": {"org_id": "orgs.id"}, "sort_key": "created_at"},
                     ("password_hash", "orgs.id", "created_at")),
        OrdinaryCase("auth_docs", "To log in, run `app login` and type your password when asked. Tokens expire "
                     "after 24 hours; see docs/auth.md for the token refresh flow.",
                     ("type your password when asked", "token refresh flow")),
        OrdinaryCase("docker_ps", f"CONTAINER ID   IMAGE          STATUS\n{sha256[:12]}   postgres:16    Up 2 hours\n"
                     f"image digest sha256:{sha256}", (sha256[:12], "postgres:16", sha256)),
        OrdinaryCase("public_key", "$ cat ~/.ssh/id_ed25519.pub\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKL"
                     "sabgH5C9okWi0dh2l9GKJl dev@laptop", ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5", "dev@laptop")),
        OrdinaryCase("source_code", 'def login(request):\n    token = lexer.next()\n    password = request.form["password"]\n'
                     '    api_key = os.environ["API_KEY"]\n    secret = get_secret(name)\n    return check(password, token)\n',
                     ('token = lexer.next()', 'password = request.form["password"]', 'api_key = os.environ["API_KEY"]',
                      "secret = get_secret(name)")),
        OrdinaryCase("helm_template", "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db\n"
                     "        key: password\ntoken: {{ .Values.token }}\npassword: ${DB_PASSWORD}\n",
                     ("secretKeyRef", "{{ .Values.token }}", "${DB_PASSWORD}")),
        OrdinaryCase("http_response", "HTTP/1.1 200 OK\nContent-Type: application/json\nX-Request-Id: "
                     f"{ids[2]}\n\n{{\"items\": 3, \"next\": null}}", ("X-Request-Id: " + ids[2], '"items": 3')),
    ]
    return out


def _measure() -> None:  # pragma: no cover - a measurement, run by hand
    """Median cost per redaction call and how much ordinary content is masked (prints a table)."""
    import argparse
    import os
    import statistics
    import time
    from pathlib import Path

    from guardrail.core import spans as tm

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--texts", type=Path, default=None,
                        help="also read every .py/.md/.toml/.yaml/.txt file under this folder as a tool result")
    parser.add_argument("--corpora", type=Path, default=Path(os.environ.get("GUARDRAIL_SENTINEL") or Path(
        __file__).resolve().parents[3] / "shared" / "corpora" / "sentinel"))
    options = parser.parse_args()
    redact_value = getattr(tm, "redact_value", None)

    def timed(fn: Any, payloads: list[Any]) -> float:
        fn(payloads[0])  # loads detect-secrets
        samples = []
        for _ in range(options.repeats if len(payloads) < 200 else max(1, options.repeats // 20)):
            for payload in payloads:
                started = time.perf_counter_ns()
                fn(payload)
                samples.append(time.perf_counter_ns() - started)
        return statistics.median(samples) / 1000

    def masked_share(payloads: list[Any]) -> tuple[int, int, float]:
        changed = chars = masked = 0
        for payload in payloads:
            text = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True)
            out = tm.redact(payload, cap=1 << 20)
            if not isinstance(payload, str):
                text = json.dumps(json.loads(text), sort_keys=True)
            chars += len(text)
            if out != text:
                changed += 1
                masked += max(0, len(text) - len(out.replace(tm.REDACTED, "")))
        return changed, len(payloads), masked / max(1, chars)

    ordinary = [c.payload for c in ordinary_results()]
    planted = [c.payload for c in secret_cases()]
    real: list[Any] = []
    for path in sorted(options.corpora.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            for event in json.loads(line).get("tool_events") or []:
                real.extend([event.get("args") or {}, str(event.get("result"))])
    rows = [("ordinary tool results (tests/hostile/spans.py)", ordinary), ("planted secrets", planted)]
    if real:
        rows.append((f"real tool args and results ({options.corpora})", real))
    if options.texts is not None:  # the files that plant fake secrets on purpose are left out
        planting = {"redaction.py", "spans.py", "test_hostile_spans.py"}
        files = [p.read_text(errors="replace") for p in sorted(options.texts.rglob("*"))
                 if p.suffix in (".py", ".md", ".toml", ".yaml", ".yml", ".txt") and p.is_file()
                 and ".venv" not in p.parts and p.name not in planting]
        rows.append((f"source files read whole ({options.texts})", files))
    for label, payloads in rows:
        changed, n, share = masked_share(payloads)
        line = f"{label}: n={n}, redact() median {timed(tm.redact, payloads):.1f} us/call"
        if redact_value is not None:
            line += f", redact_value() median {timed(redact_value, payloads):.1f} us/call"
        print(line + f"; changed {changed}/{n}, {100 * share:.2f}% of characters masked")


if __name__ == "__main__":  # pragma: no cover
    _measure()
