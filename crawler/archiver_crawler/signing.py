"""The signature of a WACZ (wacz-auth 0.1.0): `signedData` of its datapackage-digest.json.

Anonymous, as ArchiveWeb.page signs: ECDSA P-384 over the UTF-8 bytes of the digest's
`hash` string with SHA-256; `signature` is base64 of r and s side by side (48 bytes each, the
form WebCrypto verifies, not DER) and `publicKey` base64 of the key's SubjectPublicKeyInfo
(DER). Or through an authsign server (WACZ_SIGN_URL), as browsertrix-crawler and py-wacz
ask one: POST {"hash", "created"} with `Authorization: bearer <token>`; the answer is the
signedData.

The key or the server reach the crawler through its environment only (never argv, never a
log): ARCHIVER_SIGNING_KEY holds the private key's PEM.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.request

KEY_ENV = "ARCHIVER_SIGNING_KEY"
URL_ENV = "WACZ_SIGN_URL"
TOKEN_ENV = "WACZ_SIGN_TOKEN"
AUTH_VERSION = "0.1.0"
SCALAR = 48  # bytes of r and of s on P-384
SERVER_TIMEOUT = 30


class SigningFailed(ValueError):
    """The archive could not be signed; the message says why (it holds no secret)."""


def load_key(pem: str | bytes):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_private_key(pem.encode() if isinstance(pem, str) else pem, None)
    except (ValueError, TypeError) as exc:
        raise SigningFailed(f"the signing key is not a PEM private key ({type(exc).__name__})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp384r1":
        raise SigningFailed("the signing key is not an ECDSA P-384 key")
    return key


def public_key_b64(key) -> str:
    """base64 of the SubjectPublicKeyInfo (DER) of a private or public key."""
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if hasattr(key, "public_key") else key
    der = public.public_bytes(serialization.Encoding.DER,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


def sign_anonymous(digest: str, created: str, key, software: str) -> dict:
    """signedData for `digest` ("sha256:<hex>"). Deterministic (RFC 6979): the same digest
    signs alike, so a collection's download has the same bytes at each request."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    der = key.sign(digest.encode(), ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(SCALAR, "big") + s.to_bytes(SCALAR, "big")
    return {"hash": digest, "created": created, "software": software, "version": AUTH_VERSION,
            "signature": base64.b64encode(raw).decode(), "publicKey": public_key_b64(key)}


def sign_with_server(url: str, token: str, digest: str, created: str) -> dict:
    """The authsign server's signedData for `digest`, checked to be for it."""
    request = urllib.request.Request(
        url, data=json.dumps({"hash": digest, "created": created}).encode(), method="POST",
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=SERVER_TIMEOUT) as response:  # noqa: S310
            body = json.loads(response.read(1 << 20))
    except (OSError, ValueError) as exc:
        # The URL may carry credentials: the error names only what failed.
        raise SigningFailed(f"the signing server did not sign ({type(exc).__name__}: "
                            f"{getattr(exc, 'code', '') or getattr(exc, 'reason', '')})") from None
    if not isinstance(body, dict) or body.get("hash") != digest or body.get("created") != created:
        raise SigningFailed("the signing server answered for another hash or time")
    return body


def signed_data(digest: str, created: str, software: str, env=None) -> dict | None:
    """signedData by the means the environment gives (the server first), or None."""
    env = os.environ if env is None else env
    if env.get(URL_ENV):
        return sign_with_server(env[URL_ENV], env.get(TOKEN_ENV, ""), digest, created)
    if env.get(KEY_ENV):
        return sign_anonymous(digest, created, load_key(env[KEY_ENV]), software)
    return None
