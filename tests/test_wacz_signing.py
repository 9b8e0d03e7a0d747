"""Signed WACZ (issue 43): archives the crawler builds carry a wacz-auth 0.1.0 signature that a
checker written here from the spec accepts, `wacz validate` still passes, and `archiver verify`
says plainly what does not hold in a tampered copy (exit 1)."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.crawler.test_units import small_collection
from tests.test_collections import download
from tests.test_collections import two as two_crawls  # noqa: F401 (a fixture, named as imported)


def spec_check(path: Path) -> dict:
    """wacz-auth 0.1.0, verification steps 1-3 for an anonymous signature, from the spec
    (not archiver's code): every resource's sha256, the digest of datapackage.json, and
    ECDSA P-384 / SHA-256 over the `hash` string, the signature r|s in base64 and the public
    key a base64 SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    with zipfile.ZipFile(path) as zf:
        package_bytes = zf.read("datapackage.json")
        package = json.loads(package_bytes)
        for resource in package["resources"]:
            assert resource["hash"] == "sha256:" + hashlib.sha256(zf.read(resource["path"])).hexdigest()
        digest = json.loads(zf.read("datapackage-digest.json"))
    assert digest["path"] == "datapackage.json"
    assert digest["hash"] == "sha256:" + hashlib.sha256(package_bytes).hexdigest()
    signed = digest["signedData"]
    assert signed["hash"] == digest["hash"]
    assert signed["created"] == package["created"]
    assert {"software", "version"} <= set(signed)
    public = serialization.load_der_public_key(base64.b64decode(signed["publicKey"]))
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp384r1"
    raw = base64.b64decode(signed["signature"])
    assert len(raw) == 96
    der = encode_dss_signature(int.from_bytes(raw[:48], "big"), int.from_bytes(raw[48:], "big"))
    public.verify(der, signed["hash"].encode(), ec.ECDSA(hashes.SHA256()))  # raises if not
    return signed


@pytest.fixture
def signed_wacz(tmp_path, conf_data_dir, monkeypatch) -> Path:
    from archiver_crawler.wacz import build_wacz

    from archiver.conf import get
    from crawls import wacz_auth

    monkeypatch.setenv(*next(iter(wacz_auth.crawler_env(get()).items())))
    coll, _ = small_collection(tmp_path, ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"])
    return build_wacz(coll, "coll")


def rewritten(source: Path, target: Path, change) -> Path:
    """A copy of the zip with `change(name, data) -> data` applied to each member (CRCs right,
    as a careful forger would leave them)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, change(info.filename, src.read(info)))
    return target


def verify_fails(path: Path) -> str:
    with pytest.raises(CommandError) as caught:
        call_command("verify", str(path), stdout=(out := _Out()))
    assert caught.value.returncode == 1
    return out.text + str(caught.value)


class _Out:
    def __init__(self):
        self.text = ""

    def write(self, text, ending="\n"):
        self.text += text + ending

    def isatty(self):
        return False

    def flush(self):
        pass


def test_the_crawlers_wacz_is_signed_as_the_spec_says(signed_wacz, conf_data_dir):
    from crawls import wacz_auth

    signed = spec_check(signed_wacz)
    assert signed["publicKey"] == wacz_auth.public_key(conf_data_dir)
    key_file = conf_data_dir / wacz_auth.KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    validated = subprocess.run([sys.executable, "-m", "wacz", "validate", "-f", str(signed_wacz)],
                               capture_output=True, text=True, timeout=120)
    assert validated.returncode == 0, validated.stdout + validated.stderr


def test_archiver_verify_says_it_holds_and_who_signed(signed_wacz, db):
    out = _Out()
    call_command("verify", str(signed_wacz), stdout=out)
    assert "verified — signed by this archiver (key " in out.text
    assert "FAILS" not in out.text


def test_one_byte_of_a_warc_changed_fails(signed_wacz, tmp_path, db):
    def flip(name, data):
        return data[:100] + bytes([data[100] ^ 1]) + data[101:] if name.startswith("archive/") else data

    said = verify_fails(rewritten(signed_wacz, tmp_path / "warc.wacz", flip))
    assert "archive/" in said and "was changed: its sha256 is not the one in datapackage.json" in said
    assert "DOES NOT VERIFY" in said


def test_a_raw_byte_flip_fails_too(signed_wacz, tmp_path, db):
    raw = bytearray(signed_wacz.read_bytes())
    with zipfile.ZipFile(signed_wacz) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("archive/"))
    raw[info.header_offset + 30 + len(info.filename) + 50] ^= 0xFF
    (copy := tmp_path / "raw.wacz").write_bytes(bytes(raw))
    assert "was changed" in verify_fails(copy)


def test_datapackage_edited_fails(signed_wacz, tmp_path, db):
    def edit(name, data):
        return data.replace(b'"title": "coll"', b'"title": "other"') if name == "datapackage.json" else data

    said = verify_fails(rewritten(signed_wacz, tmp_path / "package.wacz", edit))
    assert "datapackage.json was changed" in said


def test_signature_altered_fails(signed_wacz, tmp_path, db):
    def alter(name, data):
        if name != "datapackage-digest.json":
            return data
        body = json.loads(data)
        raw = bytearray(base64.b64decode(body["signedData"]["signature"]))
        raw[10] ^= 1
        body["signedData"]["signature"] = base64.b64encode(bytes(raw)).decode()
        return json.dumps(body).encode()

    said = verify_fails(rewritten(signed_wacz, tmp_path / "sig.wacz", alter))
    assert "the signature does not hold" in said


def test_an_old_key_still_verifies_after_rotation(signed_wacz, conf_data_dir, db):
    from crawls import wacz_auth

    old = wacz_auth.public_key(conf_data_dir)
    new = wacz_auth.rotate_key(conf_data_dir)
    assert new != old and wacz_auth.known_keys(conf_data_dir) == [old, new]
    report = wacz_auth.verify(signed_wacz)
    assert report.ok and report.signer_words(wacz_auth.known_keys(conf_data_dir)).startswith("this archiver")
    assert report.signer_words([new]).startswith("an anonymous key")


def test_a_collection_package_digest_is_signed_and_stable(conf_data_dir):
    from crawls import wacz_auth

    package = b'{"profile": "multi-wacz-package"}'
    first = wacz_auth.package_digest(package, "2026-01-01T00:00:00Z", conf_data_dir, "archiver")
    assert first == wacz_auth.package_digest(package, "2026-01-01T00:00:00Z", conf_data_dir, "archiver")
    assert json.loads(first)["signedData"]["publicKey"] == wacz_auth.public_key(conf_data_dir)


def test_unreadable_archives_are_said_not_raised(tmp_path):
    from crawls import wacz_auth

    (junk := tmp_path / "junk.wacz").write_bytes(b"not a zip")
    report = wacz_auth.verify(junk)
    assert not report.ok and "cannot be read" in report.result()


def test_a_collections_download_is_signed_by_this_archiver(
        admin_settings, client, admin_user, tmp_path, conf_data_dir, two_crawls):  # noqa: F811
    from crawls import wacz_auth

    client.force_login(admin_user)
    _, body = download(client, two_crawls[0])
    (package := tmp_path / "collection.zip").write_bytes(body)
    spec_check(package)
    report = wacz_auth.verify(package)
    assert report.ok and report.signer_words(wacz_auth.known_keys(conf_data_dir)).startswith("this archiver")
    assert download(client, two_crawls[0])[1] == body  # the signature does not change the bytes


def test_verify_a_collection_records_each_archive_and_fails_on_what_is_not_a_wacz(db, conf_data_dir, two_crawls):  # noqa: F811
    collection, first, _second, _other = two_crawls
    said = verify_fails_args(collection.name, "--org", "a")
    assert "2 of 2 archive(s) do not verify" in said and "the archive cannot be read" in said
    row = first.files.get()
    assert row.verify_ok is False and row.verified_at is not None and row.signer == "not signed"


def verify_fails_args(*args) -> str:
    with pytest.raises(CommandError) as caught:
        call_command("verify", *args, stdout=(out := _Out()))
    assert caught.value.returncode == 1
    return out.text + str(caught.value)


def test_a_kept_signed_archive_shows_its_signer_in_the_admin_and_the_api(signed_wacz, conf_data_dir, admin_settings,
                                                                         client, admin_user):
    from django.contrib.auth.models import User

    from crawls import provenance
    from crawls.models import ApiToken, Org
    from tests.test_collections import kept_crawl

    crawl = kept_crawl(Org.objects.get_or_create(slug="a")[0], conf_data_dir, "http://a.test/", signed_wacz.read_bytes())
    crawl_file = crawl.files.get()
    assert provenance.verify_file(crawl_file).ok
    crawl_file.refresh_from_db()
    assert crawl_file.signer.startswith("this archiver (key ") and crawl_file.verify_ok
    client.force_login(admin_user)
    page = client.get(f"/admin/crawls/crawl/{crawl.pk}/change/").content.decode()
    assert f"signed by {crawl_file.signer}, verified at " in page
    assert wacz_auth_public(conf_data_dir) in client.get("/admin/").content.decode()

    _, secret = ApiToken.issue(User.objects.create_superuser("root"), "all")
    auth = {"Authorization": f"Bearer {secret}"}
    shown = client.get(f"/api/v1/files/{crawl_file.pk}", headers=auth).json()
    assert shown["signer"] == crawl_file.signer and shown["verified"] is True
    checked = client.post(f"/api/v1/files/{crawl_file.pk}/verify", headers=auth).json()
    assert checked["ok"] and [c["what"] for c in checked["checks"]] == ["files", "digest", "signature", "recorded"]

    changed = bytearray(signed_wacz.read_bytes())
    changed[len(changed) // 3] ^= 1
    (conf_data_dir / crawl_file.path).write_bytes(bytes(changed))
    checked = client.post(f"/api/v1/files/{crawl_file.pk}/verify", headers=auth).json()
    assert checked["ok"] is False
    assert "does not verify" in client.get(f"/admin/crawls/crawl/{crawl.pk}/change/").content.decode()


def wacz_auth_public(data_dir) -> str:
    from crawls import wacz_auth

    return wacz_auth.public_key(data_dir)


# --- domain signing through an authsign-like server -------------------------------------------


def test_a_domain_signature_from_the_signing_server_verifies(tmp_path, monkeypatch):
    """The crawler asks the server of WACZ_SIGN_URL (authsign's /sign protocol: POST hash and
    created, bearer token) and stores its answer. The server here is the test's own, on
    127.0.0.1, with its own CA: no RFC 3161 timestamp authority, which archiver does not check."""
    import datetime as dt
    import http.server
    import threading

    from archiver_crawler.wacz import build_wacz
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from crawls import wacz_auth

    def cert(name, key, issuer_name, issuer_key, ca):
        now = dt.datetime.now(dt.UTC)
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, issuer_name)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    chain = [cert("archiver.test", key, "test CA", ca_key, False), cert("test CA", ca_key, "test CA", ca_key, True)]
    pem = "\n".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in chain)
    asked = []

    class Signer(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(self.headers.get("Authorization"))
            signature = key.sign(body["hash"].encode(), ec.ECDSA(hashes.SHA256()))  # DER, as authsign
            answer = json.dumps({**body, "software": "test signer", "version": "0.1.0", "domain": "archiver.test",
                                 "domainCert": pem, "signature": base64.b64encode(signature).decode()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Signer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("WACZ_SIGN_URL", f"http://127.0.0.1:{server.server_port}/sign")
        monkeypatch.setenv("WACZ_SIGN_TOKEN", "t0ken")
        coll, _ = small_collection(tmp_path, ["http://127.0.0.1:9/a"])
        report = wacz_auth.verify(build_wacz(coll, "coll"))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert asked == ["bearer t0ken"]
    assert report.ok and report.signer_words([]) == "domain archiver.test", report.checks
    said = {c.what: c for c in report.checks}
    assert said["domain"].ok and said["certificate chain"].ok and said["timestamp"].ok is None


def test_verify_refuses_what_it_cannot_find_in_words(db, conf_data_dir, tmp_path):
    for target, said in ((str(tmp_path / "gone.wacz"), "no file "), ("no-such-thing", "is no file, crawl id, or collection"),
                         ("abcdef12", "no crawl")):
        with pytest.raises(CommandError) as caught:
            call_command("verify", target)
        assert said in str(caught.value), str(caught.value)


def test_signingkey_rotate_keeps_old_archives_this_archivers(signed_wacz, conf_data_dir, db):
    from crawls import wacz_auth

    old = wacz_auth.public_key(conf_data_dir)
    call_command("signingkey", "rotate", stdout=(out := _Out()))
    new = wacz_auth.public_key(conf_data_dir)
    assert new != old and f"a new key signs from now on: {wacz_auth.fingerprint(new)}" in out.text
    assert f"keys used before: {wacz_auth.fingerprint(old)}" in out.text
    call_command("verify", str(signed_wacz), stdout=(out := _Out()))
    assert f"signed by this archiver (key {wacz_auth.fingerprint(old)})" in out.text


def test_doctor_shows_the_public_key_and_makes_none(conf_data_dir):
    from archiver.conf import get
    from crawls import wacz_auth
    from runner.doctor import check_signing

    assert "no key yet" in check_signing(get()).text and not (conf_data_dir / wacz_auth.KEY_FILE).exists()
    public = wacz_auth.public_key(conf_data_dir)
    finding = check_signing(get())
    assert finding.status == "ok" and public in finding.text and wacz_auth.fingerprint(public) in finding.text
    (conf_data_dir / wacz_auth.KEY_FILE).write_text("not a key")
    finding = check_signing(get())
    assert finding.failed and "signing-key.pem" in finding.fix


def test_crawlers_get_the_key_or_the_signing_server_in_their_environment_only(conf_data_dir, tmp_path):
    from archiver.conf import Settings
    from crawls import wacz_auth
    from runner.launchers import LaunchSpec
    from runner.redis_server import RedisEndpoint

    own = wacz_auth.crawler_env(Settings(data_dir=conf_data_dir))
    assert list(own) == ["ARCHIVER_SIGNING_KEY"] and "PRIVATE KEY" in own["ARCHIVER_SIGNING_KEY"]
    domain = wacz_auth.crawler_env(Settings(data_dir=conf_data_dir, signing_url="https://sign.example/sign",
                                            signing_token="s3cret-token"))
    assert domain == {"WACZ_SIGN_URL": "https://sign.example/sign", "WACZ_SIGN_TOKEN": "s3cret-token"}
    spec = LaunchSpec(crawl_id="c0ffee", instance=0, process_id=1, instance_dir=tmp_path, workers=1,
                      redis=RedisEndpoint(host="127.0.0.1", port=9, password="p"), db=1, runner_id="r",
                      signing_env=domain)
    assert spec.environment()["WACZ_SIGN_TOKEN"] == "s3cret-token"
    assert "s3cret-token" not in repr(spec) and "s3cret-token" not in " ".join(spec.crawler_args("/crawls"))
    with pytest.raises(ValueError, match="no credentials"):
        Settings(data_dir=conf_data_dir, signing_url="https://user:pw@sign.example/sign")


def test_the_signing_server_is_read_from_the_environment_and_its_token_is_a_secret(conf_data_dir):
    from archiver import conf
    from archiver.options.variables import SECRET_VARIABLES

    settings = conf.from_environ({"ARCHIVER_DATA_DIR": str(conf_data_dir),
                                  "ARCHIVER_SIGNING_URL": "http://127.0.0.1:9/sign", "ARCHIVER_SIGNING_TOKEN": "t0k3n"})
    assert settings.signing_url == "http://127.0.0.1:9/sign"
    assert settings.signing_token.get_secret_value() == "t0k3n" and "t0k3n" not in repr(settings)
    assert "ARCHIVER_SIGNING_TOKEN" in SECRET_VARIABLES
