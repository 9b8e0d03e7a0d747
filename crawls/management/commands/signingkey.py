"""`archiver signingkey [show|rotate] [--json]`: the key archiver signs archives with."""

from __future__ import annotations

from archiver import conf
from crawls import wacz_auth
from crawls.cli import ArchiverCommand


class Command(ArchiverCommand):
    help = ("Show archiver's signing key (its public key, to give to whoever checks archives, and "
            "every key it has signed with), or rotate it: a new key signs from now on, and archives "
            "signed with an old one still verify as this archiver's.")

    def add_arguments(self, parser):
        parser.add_argument("action", nargs="?", choices=("show", "rotate"), default="show")
        parser.add_argument("--json", action="store_true", help="machine-readable")

    def run(self, *, action, json, **options):
        data_dir = conf.get().data_dir
        public = wacz_auth.rotate_key(data_dir) if action == "rotate" else wacz_auth.public_key(data_dir)
        known = wacz_auth.known_keys(data_dir)
        if json:
            self.write_json({"public_key": public, "fingerprint": wacz_auth.fingerprint(public),
                             "keys_used": [{"public_key": k, "fingerprint": wacz_auth.fingerprint(k)} for k in known]})
            return
        if action == "rotate":
            self.stdout.write(f"a new key signs from now on: {wacz_auth.fingerprint(public)}")
        self.stdout.write(f"key {wacz_auth.fingerprint(public)}: {public}")
        earlier = [wacz_auth.fingerprint(k) for k in known if k != public]
        self.stdout.write(f"keys used before: {', '.join(earlier) if earlier else 'none'}")
