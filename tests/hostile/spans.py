"""Secret-bearing tool arguments and results: each case plants a fake secret that must never reach a span."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["SecretCase", "secret_cases", "secret_padded"]


@dataclass(frozen=True)
class SecretCase:
    """One planted secret: `payload` is what the agent sends (text or arguments), `secret` what must not leak."""

    name: str
    payload: Any
    secret: str


def _jwt(rng: random.Random) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': str(rng.getrandbits(40))})}.{_token(rng, 43)}"


def _token(rng: random.Random, n: int, alphabet: str = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789") -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def secret_cases(seed: int = 0) -> list[SecretCase]:
    """The cases issue 15 lists, with fresh random secrets for `seed` (fake values, never real keys)."""
    rng = random.Random(seed)
    pem_body = "\n".join(_token(rng, 64) for _ in range(6))
    aws_secret = _token(rng, 40)
    basic = base64.b64encode(f"admin:{_token(rng, 12)}".encode()).decode()
    url_pw = _token(rng, 14)
    mysql_pw = _token(rng, 12)
    flag_pw = _token(rng, 13)
    jwt = _jwt(rng)
    stripe = "sk_live_" + _token(rng, 30)
    github_pat = "github_pat_" + _token(rng, 22) + "_" + _token(rng, 59)
    google = "AIza" + _token(rng, 35)
    short_sk = "sk-" + _token(rng, 12)
    project_sk = "sk-proj-" + _token(rng, 48)
    akia = "AKIA" + _token(rng, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    passphrase = _token(rng, 15)
    cred = _token(rng, 18)
    private_key = _token(rng, 24)
    words = " ".join(("correct", "horse", _token(rng, 7), "staple"))
    plain_pw = _token(rng, 11)
    return [
        SecretCase("pem_end_cut", {"content": f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n"},
                   pem_body.splitlines()[3]),
        SecretCase("aws_secret_access_key", f"[default]\naws_secret_access_key = {aws_secret}\nregion = x", aws_secret),
        SecretCase("authorization_basic", f"curl -H 'Authorization: Basic {basic}' https://api.example", basic),
        SecretCase("url_credentials", f"git clone https://deploy:{url_pw}@git.example.com/repo.git", url_pw),
        SecretCase("mysql_p", {"command": f"mysql -uroot -p{mysql_pw} -h db prod < dump.sql"}, mysql_pw),
        SecretCase("password_flag", {"command": f"tool login --password {flag_pw} --user x"}, flag_pw),
        SecretCase("jwt", f"token in cookie: session={jwt}; Path=/", jwt.split(".")[2]),
        SecretCase("stripe_live", {"api": stripe}, stripe),
        SecretCase("github_pat", f"export GH={github_pat}", github_pat),
        SecretCase("google_api_key", f"maps?key={google}&q=x", google),
        SecretCase("short_sk", f"OPENAI={short_sk} python run.py", short_sk),
        SecretCase("project_sk", {"env": f"OPENAI_API_KEY={project_sk}"}, project_sk),
        SecretCase("aws_key_id", f"id {akia} used", akia),
        SecretCase("passphrase_key", {"passphrase": passphrase, "path": "id_ed25519"}, passphrase),
        SecretCase("credentials_key", {"credentials": {"user": "svc", "value": cred}}, cred),
        SecretCase("private_key_key", {"private_key": private_key}, private_key),
        SecretCase("multiword_password", f"user: bob\npassword: {words}\nnext: line", words.split()[2]),
        SecretCase("password_assignment", f"password={plain_pw} other=1", plain_pw),
    ]


def secret_padded(case: SecretCase, size: int) -> str:
    """The case's payload as text buried in `size` characters of ordinary tool output (larger under make fuzz)."""
    text = case.payload if isinstance(case.payload, str) else json.dumps(case.payload)
    filler = "ok: 12 tests passed in 0.4s; nothing to report here\n"
    half = max(0, size // 2 // len(filler))
    return filler * half + text + "\n" + filler * half
