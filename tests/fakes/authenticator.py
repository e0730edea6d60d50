"""A passkey authenticator in software, for tests that need no browser: one P-256 key
per credential, "none" attestation, and the WebAuthn JSON forms a browser's
``PublicKeyCredential.toJSON()`` gives (what POST /passkeys/register and the approve and
deny routes take). ``verified`` is the user-verification flag it sets; ``rp_id`` the
relying party it signs for."""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from signoff.runtime.passkeys import b64url

ORIGIN = "http://localhost:8080"
UP, UV, AT = 0x01, 0x04, 0x40


class SoftAuthenticator:
    """A platform authenticator in software: one P-256 key per credential."""

    def __init__(self, rp_id: str = "localhost") -> None:
        self.rp_id = rp_id
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = secrets.token_bytes(16)
        self.count = 0
        self.verified = True

    def _cose(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                            -3: numbers.y.to_bytes(32, "big")})

    def _auth_data(self, extra: int = 0, attested: bytes = b"") -> bytes:
        self.count += 1
        flags = UP | (UV if self.verified else 0) | extra
        return (hashlib.sha256(self.rp_id.encode()).digest() + bytes([flags])
                + struct.pack(">I", self.count) + attested)

    @staticmethod
    def _client(kind: str, challenge: str, origin: str) -> bytes:
        return json.dumps({"type": kind, "challenge": challenge, "origin": origin}).encode()

    def create(self, options: dict[str, Any], origin: str = ORIGIN) -> dict[str, Any]:
        """navigator.credentials.create(...).toJSON()"""
        attested = (bytes(16) + struct.pack(">H", len(self.credential_id))
                    + self.credential_id + self._cose())
        auth = self._auth_data(AT, attested)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth})
        cid = b64url(self.credential_id)
        return {"id": cid, "rawId": cid, "type": "public-key",
                "response": {"clientDataJSON": b64url(self._client(
                    "webauthn.create", options["challenge"], origin)),
                    "attestationObject": b64url(attestation)},
                "clientExtensionResults": {}}

    def get(self, options: dict[str, Any], origin: str = ORIGIN) -> dict[str, Any]:
        """navigator.credentials.get(...).toJSON()"""
        auth = self._auth_data()
        data = self._client("webauthn.get", options["challenge"], origin)
        signature = self.key.sign(auth + hashlib.sha256(data).digest(),
                                  ec.ECDSA(hashes.SHA256()))
        cid = b64url(self.credential_id)
        return {"id": cid, "rawId": cid, "type": "public-key",
                "response": {"clientDataJSON": b64url(data),
                             "authenticatorData": b64url(auth),
                             "signature": b64url(signature), "userHandle": None},
                "clientExtensionResults": {}}
