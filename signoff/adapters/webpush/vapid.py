"""The VAPID key pair: drawn on the first start into the state dir (``vapid-private.pem``,
0600), the public half given to browsers (`GET /webpush/key`) as their
``applicationServerKey``. Nodes of one cluster must share the file (like the server
secret): a subscription made with one node's key is refused by the push service for
another's.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from signoff.errors import ConfigError
from signoff.runtime.state import create_private_file

VAPID_FILE = "vapid-private.pem"


@dataclass(frozen=True)
class VapidKeys:
    """The signer pywebpush uses and the public key browsers subscribe with."""

    signer: Vapid = field(repr=False)
    public_key: str  # the uncompressed P-256 point, base64url without padding


def load_vapid(state_dir: Path) -> VapidKeys:
    """The state dir's VAPID key, made on the first call."""
    path = state_dir / VAPID_FILE
    try:
        create_private_file(path, ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        pem = path.read_bytes()
        key = serialization.load_pem_private_key(pem, password=None)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"webpush: cannot keep the VAPID key in {path}: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ConfigError(f"webpush: {path} is not a P-256 private key (delete it to draw "
                          "a new one; browsers then subscribe again)")
    point = key.public_key().public_bytes(serialization.Encoding.X962,
                                          serialization.PublicFormat.UncompressedPoint)
    return VapidKeys(signer=Vapid.from_pem(pem),
                     public_key=base64.urlsafe_b64encode(point).rstrip(b"=").decode())
