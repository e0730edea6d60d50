"""The node's Ed25519 signing key, and what its signatures cover: one rule in one place.

Every audit event is signed when it is sealed onto the chain (`audit.seal`): the
signature covers the event's chain hash, which covers every field of the event and its
place in the chain (id, previous hash). Whoever can write the database can still re-hash
a rewritten log, but cannot sign it: `audit --verify` and `signoff receipt verify` fail.

The key is 32 raw bytes in ``<state_dir>/signing-key`` (0600), drawn on the first start.
Each node has its own; ``kid`` is the first 16 characters of the base64url SHA-256 of the
public key, so a key names itself. Public keys are kept in the database (`PublicKey`,
published in the same transaction as the first event a key signs), so any node can list
every node's keys at ``GET /.well-known/signoff-keys``. Rotation (`signoff keys rotate`)
writes a new key file; the running daemon notices it on its next signature, and the old
public key stays published, marked retired, so old receipts keep verifying.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from signoff.errors import ConfigError
from signoff.runtime.canonical import canonical_json
from signoff.runtime.state import PRIVATE_FILE, create_private_file

KEY_FILE = "signing-key"
KEY_BYTES = 32
SIGNED = "signoff.audit/1"  # what a signature is about: part of the signed bytes
KID_CHARS = 16


def b64u(data: bytes) -> str:
    """base64url without padding (the JOSE spelling)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64u(text: str) -> bytes:
    """The bytes of a base64url text (padding optional); ValueError when it is not one."""
    clean = text.strip()
    if not clean or any(c not in _B64U for c in clean.rstrip("=")):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(clean + "=" * (-len(clean) % 4))


_B64U = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def key_id(public_raw: bytes) -> str:
    """The kid of a public key: derived from it, so a key and its kid cannot disagree."""
    return b64u(hashlib.sha256(public_raw).digest())[:KID_CHARS]


def key_id_of(public_key: str) -> str:
    """The kid of a base64url public key; ValueError when it is not a 32-byte key."""
    raw = unb64u(public_key)
    if len(raw) != 32:
        raise ValueError(f"{public_key[:60]!r} is not a base64url Ed25519 public key")
    return key_id(raw)


def signed_bytes(kid: str, event_hash: str) -> bytes:
    """The bytes a signature covers: the event's chain hash, the key and the format."""
    return canonical_json({"format": SIGNED, "hash": event_hash, "kid": kid}).encode("utf-8")


def public_raw(key: Ed25519PrivateKey) -> bytes:
    """The 32 raw bytes of a private key's public half."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def check_signature(public_key: str, kid: str, event_hash: str, sig: str) -> str | None:
    """What is wrong with ``sig`` over an event hash under ``public_key`` (base64url), or
    None when it is a good signature of that key."""
    try:
        raw = unb64u(public_key)
        key = Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        return "the public key is not a base64url Ed25519 key"
    if key_id(raw) != kid:
        return f"it was signed by key {kid}, not by key {key_id(raw)}"
    try:
        key.verify(unb64u(sig), signed_bytes(kid, event_hash))
    except (InvalidSignature, ValueError):
        return "the signature does not match (the event was changed after it was signed)"
    return None


@dataclass(frozen=True)
class PublicKey:
    """One published public key (a row of the database's key list)."""

    kid: str
    public_key: str  # base64url of the 32 raw bytes
    node_id: str
    created_at: datetime
    retired_at: datetime | None = None
    since: int = 0  # the first audit event this key signed (or could sign)

    def public(self) -> dict[str, object]:
        """The key as ``GET /.well-known/signoff-keys`` lists it (a JWK with extras)."""
        return {"kid": self.kid, "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA",
                "x": self.public_key, "node": self.node_id,
                "created_at": self.created_at.isoformat(),
                "retired_at": self.retired_at.isoformat() if self.retired_at else None,
                "status": "retired" if self.retired_at else "active"}


class Signer(Protocol):
    """Signs audit events as they are sealed (the store calls it inside the transaction)."""

    node_id: str

    def sign(self, event_hash: str) -> tuple[str, str]:
        """(kid, base64url signature) over `signed_bytes` of ``event_hash``."""
        ...

    def public_key(self, kid: str) -> str:
        """The base64url public key of ``kid`` (one this signer signed with)."""
        ...


class KeySigner:
    """Signs with one in-memory key (tests, benchmarks, embedding)."""

    def __init__(self, key: Ed25519PrivateKey, *, node_id: str = "node") -> None:
        self.node_id = node_id
        raw = public_raw(key)
        self.kid, self._public, self._key = key_id(raw), b64u(raw), key

    def sign(self, event_hash: str) -> tuple[str, str]:
        """Sign with the key."""
        return self.kid, b64u(self._key.sign(signed_bytes(self.kid, event_hash)))

    def public_key(self, kid: str) -> str:
        """The key's public half."""
        return self._public


class KeyFileSigner:
    """Signs with the key in the state dir, re-read when the file is replaced (rotation):
    a ``stat`` per signature tells, far cheaper than the signature itself."""

    def __init__(self, path: Path, *, node_id: str) -> None:
        self.path, self.node_id = path, node_id
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._signer = KeySigner(read_key(path), node_id=node_id)
        self._publics = {self._signer.kid: self._signer.public_key("")}

    def _current(self) -> KeySigner:
        try:
            st = os.stat(self.path)
        except OSError:  # gone while running: keep signing with the key we hold
            return self._signer
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp != self._stamp:
            with self._lock:
                signer = KeySigner(read_key(self.path), node_id=self.node_id)
                self._publics[signer.kid] = signer.public_key("")
                self._signer, self._stamp = signer, stamp
        return self._signer

    @property
    def kid(self) -> str:
        """The kid of the key signing now."""
        return self._current().kid

    def sign(self, event_hash: str) -> tuple[str, str]:
        """Sign with the key the file holds now."""
        return self._current().sign(event_hash)

    def public_key(self, kid: str) -> str:
        """The public half of a key this signer has held."""
        return self._publics[kid]


def read_key(path: Path) -> Ed25519PrivateKey:
    """The private key kept at ``path``; ConfigError naming what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the signing key {path}: {exc}") from exc
    if len(data) != KEY_BYTES:
        raise ConfigError(f"the signing key {path} holds {len(data)} bytes, not {KEY_BYTES}: "
                          "restore it from a backup, or run `signoff keys rotate`")
    return Ed25519PrivateKey.from_private_bytes(data)


def node_signer(state_dir: Path, *, node_id: str) -> KeyFileSigner:
    """The node's signer, its key drawn (0600) on the first call."""
    path = state_dir / KEY_FILE
    try:
        create_private_file(path, new_key_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot keep the signing key in {path}: {exc}") from exc
    return KeyFileSigner(path, node_id=node_id)


def new_key_bytes() -> bytes:
    """32 raw bytes of a new Ed25519 private key."""
    return Ed25519PrivateKey.generate().private_bytes_raw()


def signer_of(data: bytes, *, node_id: str) -> KeySigner:
    """The signer of raw private key bytes."""
    return KeySigner(Ed25519PrivateKey.from_private_bytes(data), node_id=node_id)


def held_key(state_dir: Path, *, node_id: str) -> KeySigner | None:
    """The signer of the key the state dir holds now, or None when it holds none."""
    path = state_dir / KEY_FILE
    return KeySigner(read_key(path), node_id=node_id) if path.exists() else None


def install_key(state_dir: Path, data: bytes) -> None:
    """Make ``data`` the node's key: written 0600 beside the old one, then renamed over it,
    so the file is never half-written (a running daemon signs with it from its next event)."""
    path, fresh = state_dir / KEY_FILE, state_dir / (KEY_FILE + ".new")
    try:
        fresh.unlink(missing_ok=True)
        create_private_file(fresh, data)
        os.chmod(fresh, PRIVATE_FILE)
        os.replace(fresh, path)
    except OSError as exc:
        raise ConfigError(f"cannot write a new signing key in {state_dir}: {exc}") from exc
