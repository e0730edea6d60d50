"""The per-decision cost of signing audit events (Ed25519), as a ratio to not signing.

Run: ``python bench/signing.py [--decisions N] [--rounds R]``.

A node from `build_node` on a SQLite file in a temporary directory (the default
deployment) gets N pending outside requests (SEND, each a different action), then a
person's Once on each through `Decider.decide`, the code every surface calls; only the
decisions are timed. The same is done with the store's signer removed (the 0.2 cost),
alternating R rounds of each on fresh databases; the best round of each counts.

Prints the microseconds per decision of each, the cost of one signature alone, the line
``ratio signed/unsigned = X`` and then ``ok`` when X ≤ `TARGET` (1.2), ``over`` otherwise.
Nothing gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.config.settings import Settings
from signoff.runtime.models import RiskClass, Scope
from signoff.runtime.outside import OutsideRequests, RequestSpec
from signoff.runtime.signing import KeySigner
from signoff.wiring import build_node

DECISIONS = 200
ROUNDS = 5
TARGET = 1.2


async def one_round(decisions: int, *, signed: bool) -> float:
    """Seconds per decision on a fresh node (signing or not)."""
    with tempfile.TemporaryDirectory(prefix="signoff-bench-signing-") as tmp:
        work = Path(tmp) / "work"
        settings = Settings.model_validate({"daemon": {
            "work_dir": str(work), "state_dir": str(Path(tmp) / "state")}})
        node = build_node(settings, surfaces={})
        if not signed:
            node.store.sealer.signer = None
        await node.store.open()
        try:
            desk = OutsideRequests(engine=node.engine)
            ids = []
            for i in range(decisions):
                approval, _ = await desk.submit(RequestSpec(
                    tool="deploy", args={"build": i}, policy_id="bench", requester="agent",
                    risk=RiskClass.SEND, targets=(f"env-{i}",)))
                ids.append(approval.id)
            began = time.perf_counter()
            for approval_id in ids:
                result = await node.decider.decide(approval_id, Scope.ONCE, "web:admin",
                                                   channel="web")
                assert result.accepted, result.message
            elapsed = time.perf_counter() - began
            events = await node.store.audit_chain(after=0, limit=10 * decisions)
            assert all((e.sig is not None) == signed for e in events)
        finally:
            await node.store.close()
    return elapsed / decisions


def sign_cost(n: int = 2000) -> float:
    """Seconds per signature alone."""
    signer = KeySigner(Ed25519PrivateKey.generate())
    began = time.perf_counter()
    for i in range(n):
        signer.sign(f"{i:064x}")
    return (time.perf_counter() - began) / n


async def main() -> None:
    """Alternate rounds, print the best of each and the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=DECISIONS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    plain, signed = [], []
    for _ in range(args.rounds):
        plain.append(await one_round(args.decisions, signed=False))
        signed.append(await one_round(args.decisions, signed=True))
    best_plain, best_signed = min(plain), min(signed)
    ratio = best_signed / best_plain
    print(f"decision unsigned: {best_plain * 1e6:.0f} us, signed: {best_signed * 1e6:.0f} us "
          f"({args.decisions} decisions, best of {args.rounds} rounds)")
    print(f"one Ed25519 signature: {sign_cost() * 1e6:.1f} us")
    print(f"ratio signed/unsigned = {ratio:.3f}")
    print("ok" if ratio <= TARGET else "over")


if __name__ == "__main__":
    asyncio.run(main())
