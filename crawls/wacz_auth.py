"""Signed WACZ (wacz-auth 0.1.0, docs/security.md): archiver's signing key, the signature of
a collection's package, and verify(): every file's hash against datapackage.json, the
digest, the signature, said check by check.

The key is made once in the data dir (0600). Every public key archiver signed with is kept in
signing-keys.txt, so that archives signed before a rotation still say "this archiver".
A WACZ is hostile input (an import, a crawler's output): members are found by name only,
JSON reads are bounded, and a member that inflates far past its stored size is refused.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from archiver_crawler import signing

from archiver.private_files import write_private

KEY_FILE = "signing-key.pem"
KEYS_FILE = "signing-keys.txt"
DIGEST = "datapackage-digest.json"
PACKAGE = "datapackage.json"
MAX_JSON = 64 << 20  # bytes of datapackage.json read (a big crawl lists thousands of files)
MAX_MEMBERS = 100_000
MAX_RATIO = 200  # an entry inflating past this many times its stored bytes is a bomb
HASH = re.compile(r"sha256:([0-9a-f]{64})")
CHUNK = 1 << 20
log = logging.getLogger(__name__)
PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


# --- the key ------------------------------------------------------------------------------


def _new_key(data_dir: Path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _remember(data_dir, signing.public_key_b64(key))  # listed before it signs anything
    write_private(data_dir / KEY_FILE, pem)
    return key


def _remember(data_dir: Path, public: str) -> None:
    known = known_keys(data_dir)
    if public not in known:
        write_private(data_dir / KEYS_FILE, "".join(f"{k}\n" for k in [*known, public]).encode())


def signing_key(data_dir: Path):
    """archiver's private key, made on first use."""
    path = Path(data_dir) / KEY_FILE
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        return _new_key(Path(data_dir))
    key = signing.load_key(pem)
    _remember(Path(data_dir), signing.public_key_b64(key))
    return key


def rotate_key(data_dir: Path) -> str:
    """A new key signs from now on; the old one's public key stays known. Returns the new
    public key."""
    signing_key(data_dir)  # the current one listed, if it never signed
    return signing.public_key_b64(_new_key(Path(data_dir)))


def known_keys(data_dir: Path) -> list[str]:
    """Public keys (base64 SPKI) archiver has signed with, oldest first."""
    with contextlib.suppress(FileNotFoundError):
        return [line.strip() for line in (Path(data_dir) / KEYS_FILE).read_text().splitlines() if line.strip()]
    return []


def public_key(data_dir: Path) -> str:
    return signing.public_key_b64(signing_key(data_dir))


def fingerprint(public: str) -> str:
    """A short name for a public key: the first 16 hex digits of its SPKI's SHA-256."""
    try:
        return hashlib.sha256(base64.b64decode(public, validate=True)).hexdigest()[:16]
    except ValueError:
        return "unreadable"


def crawler_env(settings) -> dict[str, str]:
    """How a crawler signs (environment only: it holds the key or the token): through the
    authsign server when ARCHIVER_SIGNING_URL is set (browsertrix-crawler reads the same
    variables), else with archiver's own key."""
    if settings.signing_url:
        token = settings.signing_token.get_secret_value() if settings.signing_token else ""
        return {signing.URL_ENV: settings.signing_url, **({signing.TOKEN_ENV: token} if token else {})}
    from cryptography.hazmat.primitives import serialization

    try:
        key = signing_key(settings.data_dir)
    except (OSError, signing.SigningFailed) as exc:
        # Crawls still run, their archives unsigned: `archiver doctor` says what to fix.
        log.warning("archives will not be signed: archiver's signing key cannot be read or made (%s)", exc)
        return {}
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return {signing.KEY_ENV: pem.decode()}


def package_digest(package_bytes: bytes, created: str, data_dir: Path, software: str) -> bytes:
    """datapackage-digest.json of a collection's package, signed with archiver's own key
    (deterministic: a download's bytes are the same at every request)."""
    digest = "sha256:" + hashlib.sha256(package_bytes).hexdigest()
    body = {"path": PACKAGE, "hash": digest,
            "signedData": signing.sign_anonymous(digest, created, signing_key(data_dir), software)}
    return json.dumps(body, indent=2, sort_keys=True).encode()


# --- verification -------------------------------------------------------------------------


@dataclass
class Check:
    what: str
    ok: bool | None  # None: not checked, or nothing to check
    said: str


@dataclass
class Report:
    """What holds and what does not in one archive."""

    name: str
    checks: list[Check] = field(default_factory=list)
    signed: bool = False
    signer: str = ""  # "key <fingerprint>" or "domain <name>"
    public_key: str = ""
    domain: str = ""
    created: str = ""

    @property
    def ok(self) -> bool:
        return all(check.ok is not False for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.ok is False]

    def add(self, what: str, ok: bool | None, said: str) -> bool | None:
        self.checks.append(Check(what, ok, said))
        return ok

    def signer_words(self, known: list[str] | None = None) -> str:
        """Who signed, in words: "this archiver (key …)" for a key archiver has used."""
        if not self.signed:
            return "not signed"
        if self.domain:
            return f"domain {self.domain}"
        mine = known is not None and self.public_key in known
        return f"{'this archiver' if mine else 'an anonymous key'} (key {fingerprint(self.public_key)})"

    def result(self) -> str:
        """One line for a CrawlFile's row."""
        if self.ok:
            return "verified" if self.signed else "hashes hold; not signed"
        return "; ".join(check.said for check in self.failures)[:1000]

    def summary(self, known: list[str] | None = None) -> dict:
        return {"name": self.name, "ok": self.ok, "signed": self.signed,
                "signer": self.signer_words(known), "public_key": self.public_key,
                "domain": self.domain, "created": self.created,
                "checks": [{"what": c.what, "ok": c.ok, "said": c.said} for c in self.checks]}


class Unreadable(Exception):
    pass


def _member(zf: zipfile.ZipFile, name: str) -> zipfile.ZipInfo | None:
    with contextlib.suppress(KeyError):
        info = zf.getinfo(name)
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_RATIO * info.compress_size + CHUNK:
            raise Unreadable(f"{name} would inflate {info.file_size} bytes from {info.compress_size}")
        return info
    return None


def _json(zf: zipfile.ZipFile, name: str):
    info = _member(zf, name)
    if info is None:
        return None, b""
    if info.file_size > MAX_JSON:
        raise Unreadable(f"{name} is {info.file_size} bytes")
    data = zf.read(info)
    try:
        return json.loads(data), data
    except ValueError:
        raise Unreadable(f"{name} is not JSON") from None


def _hash_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with zf.open(info) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def verify(source, name: str = "") -> Report:
    """Verify a WACZ (a path, or a seekable binary file): never raises for what the archive
    holds; a report whose `ok` is False says each thing that does not hold."""
    report = Report(name or (Path(source).name if isinstance(source, (str, Path)) else "archive"))
    try:
        with zipfile.ZipFile(source) as zf:
            if len(zf.infolist()) > MAX_MEMBERS:
                raise Unreadable(f"a zip of {len(zf.infolist())} entries")
            _verify_zip(zf, report)
    except (zipfile.BadZipFile, OSError, EOFError, Unreadable, NotImplementedError) as exc:
        report.add("archive", False, f"the archive cannot be read: {exc}")
    return report


def _verify_zip(zf: zipfile.ZipFile, report: Report) -> None:
    package, package_bytes = _json(zf, PACKAGE)
    if not isinstance(package, dict) or not isinstance(package.get("resources"), list):
        report.add("datapackage.json", False, "datapackage.json is missing or lists no resources")
        return
    _verify_resources(zf, package["resources"], report)
    digest, _ = _json(zf, DIGEST)
    if not isinstance(digest, dict):
        report.add("digest", None, "no datapackage-digest.json: not signed")
        return
    actual = "sha256:" + hashlib.sha256(package_bytes).hexdigest()
    if digest.get("hash") == actual:
        report.add("digest", True, "datapackage.json matches datapackage-digest.json")
    else:
        report.add("digest", False, "datapackage.json was changed: its hash is not the one in datapackage-digest.json")
    signed = digest.get("signedData")
    if not isinstance(signed, dict):
        report.add("signature", None, "not signed")
        return
    report.signed = True
    report.created = str(signed.get("created", ""))
    if signed.get("hash") != actual:
        report.add("signed hash", False, "the signature is for another datapackage.json")
    if signed.get("created") != package.get("created"):
        report.add("created", False, f"signed at {report.created}, but datapackage.json says "
                   f"{package.get('created')}")
    if signed.get("publicKey"):
        _verify_anonymous(signed, report)
    elif signed.get("domainCert") and signed.get("domain"):
        _verify_domain(signed, report)
    else:
        report.add("signature", False, "signedData has neither a publicKey nor a domain certificate")


def _verify_resources(zf: zipfile.ZipFile, resources: list, report: Report) -> None:
    bad, count = 0, 0
    for resource in resources:
        path = resource.get("path") if isinstance(resource, dict) else None
        if not isinstance(path, str):
            report.add("files", False, "datapackage.json lists a resource without a path")
            bad += 1
            continue
        count += 1
        info = _member(zf, path)
        match = HASH.fullmatch(str(resource.get("hash", "")))
        if info is None:
            bad += 1
            report.add(path, False, f"{path} is listed in datapackage.json but not in the archive")
        elif match is None:
            bad += 1
            report.add(path, False, f"{path} has no sha256 in datapackage.json")
        else:
            try:
                actual, size = _hash_member(zf, info)
            except zipfile.BadZipFile:  # its CRC-32 in the zip does not hold either
                actual, size = "", -1
            if actual != match.group(1) or resource.get("bytes", size) != size:
                bad += 1
                report.add(path, False, f"{path} was changed: its sha256 is not the one in datapackage.json")
    listed = {r.get("path") for r in resources if isinstance(r, dict)} | {PACKAGE, DIGEST}
    unlisted = [n for n in zf.namelist() if n not in listed and not n.endswith("/")]
    if unlisted:
        report.add("unlisted", None, f"{len(unlisted)} file(s) not in datapackage.json, not checked: "
                   + ", ".join(unlisted[:5]))
    if not bad:
        report.add("files", True, f"all {count} file(s) match their sha256 in datapackage.json")


def _raw_signature(signature: bytes, size: int) -> bytes | None:
    """A DER signature as r and s side by side, or a raw one as it is."""
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    if len(signature) == 2 * size:
        return signature
    try:
        r, s = decode_dss_signature(signature)
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    except (ValueError, OverflowError):
        return None


def _check_ecdsa(public, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    size = (public.curve.key_size + 7) // 8
    raw = _raw_signature(signature, size)
    if raw is None:
        return False
    der = encode_dss_signature(int.from_bytes(raw[:size], "big"), int.from_bytes(raw[size:], "big"))
    try:
        public.verify(der, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _verify_anonymous(signed: dict, report: Report) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    report.public_key = str(signed["publicKey"])
    report.signer = f"key {fingerprint(report.public_key)}"
    try:
        public = serialization.load_der_public_key(base64.b64decode(report.public_key, validate=True))
        signature = base64.b64decode(str(signed.get("signature", "")), validate=True)
    except ValueError:
        report.add("signature", False, "the public key or the signature is not readable base64 DER")
        return
    if not isinstance(public, ec.EllipticCurvePublicKey):
        report.add("signature", False, "the public key is not an ECDSA key")
        return
    if _check_ecdsa(public, signature, str(signed.get("hash", "")).encode()):
        report.add("signature", True, f"the signature holds (ECDSA {public.curve.name}, key "
                   f"{fingerprint(report.public_key)})")
    else:
        report.add("signature", False, "the signature does not hold: it was not made by this key over this hash")


def _verify_domain(signed: dict, report: Report) -> None:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    report.domain = str(signed["domain"])
    report.signer = f"domain {report.domain}"
    try:
        chain = [x509.load_pem_x509_certificate(pem) for pem in
                 PEM_CERT.findall(str(signed["domainCert"]).encode())]
        signature = base64.b64decode(str(signed.get("signature", "")), validate=True)
    except ValueError:
        report.add("signature", False, "the domain certificate or the signature is not readable")
        return
    if not chain or not isinstance(chain[0].public_key(), ec.EllipticCurvePublicKey):
        report.add("signature", False, "the domain certificate holds no ECDSA key")
        return
    if _check_ecdsa(chain[0].public_key(), signature, str(signed.get("hash", "")).encode()):
        report.add("signature", True, f"the signature holds (the certificate of {report.domain})")
    else:
        report.add("signature", False, "the signature does not hold for the domain certificate's key")
    names = _cert_names(chain[0])
    report.add("domain", report.domain in names,
               f"the certificate is for {report.domain}" if report.domain in names
               else f"the certificate is for {', '.join(sorted(names)) or 'no name'}, not {report.domain}")
    linked = True
    for child, parent in zip(chain, chain[1:], strict=False):
        try:
            child.verify_directly_issued_by(parent)
        except (InvalidSignature, ValueError, TypeError):  # TypeError: an unsupported algorithm
            linked = False
    report.add("certificate chain", linked, f"each of the {len(chain)} certificate(s) is issued by the next"
               if linked else "the certificate chain is broken")
    report.add("timestamp", None, "the RFC 3161 timestamp and the chain's root are not checked by archiver"
               if signed.get("timeSignature") else "no timestamp")


def _cert_names(cert) -> set[str]:
    from cryptography import x509

    names = {a.value for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)}
    with contextlib.suppress(x509.ExtensionNotFound):
        names |= set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                     .get_values_for_type(x509.DNSName))
    return {str(n) for n in names}
