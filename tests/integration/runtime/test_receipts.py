"""Signed receipts on a real database: printed by the CLI, checked offline, tamper-proof.

A real node (SQLite, and PostgreSQL where the store matters) decides a few requests;
every audit event it seals carries its Ed25519 signature. A receipt printed by
`signoff receipt` verifies with `signoff receipt verify` after the database is gone;
an edited receipt, a wrong key and a rewritten-and-rehashed log all fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.cli.receipts import list_keys, rotate_key
from signoff.errors import BadArguments
from signoff.runtime import audit, receipts
from signoff.runtime.models import AuditEvent, RiskClass, Scope
from signoff.runtime.signing import KEY_FILE, KeySigner, PublicKey, b64u, public_raw
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.sql.tables import AuditHeadRow, AuditRow
from signoff.wiring import Node
from tests.conftest import NodeFactory
from tests.factories import NoopTool, answer, noop, start

audit_t = AuditRow.__table__  # type: ignore[attr-defined]
head_t = AuditHeadRow.__table__  # type: ignore[attr-defined]
AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def _decide(node: Node, *scopes: Scope) -> list[str]:
    """One SEND request per scope, answered with it; the approval ids."""
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND), replace=True)
    ids = []
    for i, scope in enumerate(scopes):
        task = await start(node, [noop(f"target-{i}", tool="notify_team")])
        assert task.approval is not None
        ids.append(task.approval.id)
        await answer(node, task.id, scope)
    return ids


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


async def _verify(url: str) -> audit.Verification:
    store = make_store(url)
    await store.open()
    try:
        return await audit.verify(store)
    finally:
        await store.close()


def _rewrite(store_url: str, events: list[AuditEvent], signer: KeySigner | None) -> None:
    """Forge the log from its third event on: each decision's actor changed, every event
    re-hashed (head included) and signed by ``signer`` (None: the old signatures kept, as
    a forger without any key must)."""
    prev, engine = events[1].hash, sa.create_engine(store_url)
    with engine.begin() as conn:
        for event in events[2:]:
            changed = event.model_copy(update={"actor": "slack:UFORGED"}) \
                if event.kind == "decision" else event
            sealed = audit.seal(changed, event_id=event.id, prev_hash=prev, signer=signer)
            if signer is None:
                sealed = sealed.model_copy(update={"kid": event.kid, "sig": event.sig})
            conn.execute(audit_t.update().where(audit_t.c.id == event.id)
                         .values(data=sealed.model_dump_json()))
            prev = sealed.hash
        conn.execute(head_t.update().values(count=len(events), hash=prev))
    engine.dispose()


async def test_a_receipt_verifies_offline_after_the_database_is_deleted(
        node_factory: NodeFactory, sqlite_url: str, tmp_path: Path) -> None:
    """`signoff receipt ID` prints a signed receipt; with the database deleted,
    `signoff receipt verify FILE --key PUB` still says ok (exit 0)."""
    node = await node_factory(database=sqlite_url)
    approved, _ = await _decide(node, Scope.ONCE, Scope.DENY)
    await node.store.close()
    printed = _cli("receipt", approved, "--database", sqlite_url, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    body = json.loads(printed.stdout)
    assert body["event"]["approval_id"] == approved and body["event"]["kind"] == "decision"
    assert body["event"]["decision"] == "approve" and body["sig"] and body["kid"]
    listed = _cli("keys", "--json", "--database", sqlite_url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    key = json.loads(listed.stdout)["keys"][0]
    assert key["kid"] == body["kid"] and key["status"] == "active"
    file = tmp_path / "receipt.json"
    file.write_text(printed.stdout)
    Path(sqlite_url.removeprefix("sqlite:///")).unlink()
    ok = _cli("receipt", "verify", str(file), "--key", key["x"], cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok: event") and "approve once" in ok.stdout


async def test_a_tampered_receipt_or_a_wrong_key_fails(node_factory: NodeFactory,
                                                       sqlite_url: str, tmp_path: Path) -> None:
    """An edited receipt fails (re-hashed or not), and so does a good one under another
    key; the CLI exits 1 naming why."""
    node = await node_factory(database=sqlite_url)
    denied, = await _decide(node, Scope.DENY)
    body = await receipts.receipt(node.store, denied)
    key = body["key"]["x"]
    assert receipts.check(json.dumps(body), key).problem is None
    edited = json.loads(json.dumps(body))
    edited["event"]["decision"] = "approve"
    assert "changed" in (receipts.check(json.dumps(edited), key).problem or "")
    edited["event"]["hash"] = audit.digest_of(edited["event"])
    assert "signature is not valid" in (receipts.check(json.dumps(edited), key).problem or "")
    other = b64u(public_raw(Ed25519PrivateKey.generate()))
    assert "signed by key" in (receipts.check(json.dumps(body), other).problem or "")
    file = tmp_path / "edited.json"
    file.write_text(json.dumps(edited))
    refused = _cli("receipt", "verify", str(file), "--key", key, cwd=tmp_path)
    assert refused.returncode == 1 and "receipt NOT valid" in refused.stderr


@pytest.mark.parametrize("value", ["NaN", "Infinity", '"\\ud800"'])
async def test_a_receipt_holding_a_value_json_cannot_hash_is_not_valid(
        node_factory: NodeFactory, sqlite_url: str, tmp_path: Path, value: str) -> None:
    """A receipt edited to hold NaN, Infinity or a lone surrogate (JSON parsers read them;
    canonical JSON cannot spell them) is "NOT valid", exit 1, not a traceback."""
    node = await node_factory(database=sqlite_url)
    approved, = await _decide(node, Scope.ONCE)
    body = await receipts.receipt(node.store, approved)
    text = json.dumps(body).replace('"reason": null', f'"reason": {value}')
    assert value in text
    file = tmp_path / "odd.json"
    file.write_text(text)
    refused = _cli("receipt", "verify", str(file), "--key", body["key"]["x"], cwd=tmp_path)
    assert refused.returncode == 1 and "receipt NOT valid" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


async def test_a_receipt_pins_the_args_approved_and_reveals_them_only_when_asked(
        node_factory: NodeFactory, sqlite_url: str, tmp_path: Path) -> None:
    """The decision's event pins the action's args (message content included) without
    showing them: a plain receipt holds no word of the message. `--reveal` adds the args
    and the request's key; `verify` then says they are the args approved, and fails for
    a receipt whose revealed message was changed (before, a receipt for "pay 12 EUR"
    proved a send_email to that address, whatever its body)."""
    node = await node_factory(database=sqlite_url)
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND), replace=True)
    task = await start(node, [noop("ops", tool="notify_team", text="pay 12 EUR to bob")])
    assert task.approval is not None
    await answer(node, task.id, Scope.ONCE)
    approval_id = task.approval.id
    plain = await receipts.receipt(node.store, approval_id)
    assert plain["event"]["args_digest"] and "12 EUR" not in json.dumps(plain)
    assert "reveal" not in plain
    await node.store.close()
    printed = _cli("receipt", approval_id, "--reveal", "--database", sqlite_url, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    shown = json.loads(printed.stdout)
    assert shown["reveal"]["args"] == {"target": "ops", "text": "pay 12 EUR to bob"}
    key = shown["key"]["x"]
    file = tmp_path / "revealed.json"
    file.write_text(printed.stdout)
    ok = _cli("receipt", "verify", str(file), "--key", key, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "the args under \"reveal\" are the ones it was about" in ok.stdout
    shown["reveal"]["args"]["text"] = "pay 12000 EUR to eve"
    file.write_text(json.dumps(shown))
    forged = _cli("receipt", "verify", str(file), "--key", key, cwd=tmp_path)
    assert forged.returncode == 1 and "not the ones the event pins" in forged.stderr
    assert receipts.check(json.dumps({**plain, "reveal": {"args": {}, "key": "%"}}),
                          key).problem == "\"reveal\" holds a key or args no request could have"


async def test_an_edited_approval_reveals_the_args_it_approved(
        node_factory: NodeFactory, sqlite_url: str) -> None:
    """A request approved with edited args: its receipt pins and reveals the edit (what
    ran), not the args first asked."""
    node = await node_factory(database=sqlite_url)
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND), replace=True)
    task = await start(node, [noop("ops", tool="notify_team", text="first draft")])
    assert task.approval is not None
    result = await node.decider.decide(task.approval.id, Scope.ONCE, actor="web:admin",
                                       args={"target": "ops", "text": "final words"})
    assert result.accepted, result.message
    body = await receipts.receipt(node.store, task.approval.id, reveal=True)
    assert body["reveal"]["args"]["text"] == "final words"
    assert receipts.check(json.dumps(body), body["key"]["x"]).revealed


async def test_a_receipt_by_event_number_names_that_event(node_factory: NodeFactory,
                                                          store_url: str) -> None:
    """An audit event number gives that event's receipt; an unknown ID is a clear error."""
    node = await node_factory(database=store_url)
    await _decide(node, Scope.ONCE)
    events = await node.store.audit_chain(after=0, limit=100)
    body = await receipts.receipt(node.store, str(events[0].id))
    assert body["event"]["id"] == events[0].id and body["event"]["kind"] == "evaluation"
    assert receipts.check(json.dumps(body), body["key"]["x"]).problem is None
    with pytest.raises(BadArguments, match="no audit event 999"):
        await receipts.find_event(node.store, "999")
    with pytest.raises(BadArguments, match="no approval"):
        await receipts.find_event(node.store, "ap-unknown")


async def test_a_rewritten_and_rehashed_log_fails_audit_verify(
        node_factory: NodeFactory, store_url: str, tmp_path: Path) -> None:
    """Editing an event and re-hashing the chain after it (head record included) keeps the
    hash chain whole, but the signatures no longer match: verify fails at that event;
    signing the forgery with a key of one's own fails too (that key is not published)."""
    node = await node_factory(database=store_url)
    await _decide(node, Scope.DENY, Scope.ONCE)
    events = await node.store.audit_chain(after=0, limit=100)
    assert all(e.sig for e in events) and (await _verify(store_url)).signed == len(events)

    _rewrite(store_url, events, None)
    first_changed = next(e.id for e in events[2:] if e.kind == "decision")
    result = await _verify(store_url)
    assert not result.ok and result.bad_event == first_changed
    assert "bad signature" in (result.problem or "")
    _rewrite(store_url, events, KeySigner(Ed25519PrivateKey.generate()))
    result = await _verify(store_url)
    assert not result.ok and "not published" in (result.problem or "")
    broken = _cli("audit", "--verify", "--database", store_url, cwd=tmp_path)
    assert broken.returncode == 1 and "not published" in broken.stderr


async def test_rotation_keeps_old_receipts_verifiable(
        node_factory: NodeFactory, sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """After `signoff keys rotate` the node signs with a new key at once; the old key stays
    published (retired, as `signoff keys` says), an old receipt still verifies, and so does
    the whole log."""
    node = await node_factory(database=sqlite_url)
    before, = await _decide(node, Scope.ONCE)
    old = await receipts.receipt(node.store, before)
    state = node.settings.resolved_state_dir(None)
    assert (state / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert await rotate_key(node.settings, work_dir=None, database=sqlite_url) == 0
    after, = await _decide(node, Scope.ONCE)
    new = await receipts.receipt(node.store, after)
    assert new["kid"] != old["kid"]
    keys = {k.kid: k for k in await node.store.signing_keys()}
    assert keys[old["kid"]].retired_at is not None and keys[new["kid"]].retired_at is None
    assert receipts.check(json.dumps(old), keys[old["kid"]].public_key).problem is None
    assert receipts.check(json.dumps(new), keys[new["kid"]].public_key).problem is None
    result = await _verify(sqlite_url)
    assert result.ok, result.problem
    capsys.readouterr()
    assert await list_keys(node.settings, as_json=False, work_dir=None, database=sqlite_url) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [old["kid"], new["kid"]]
    assert "retired" in lines[0] and lines[1].endswith("active")


async def test_a_log_resigned_with_a_key_the_forger_published_fails_against_a_pinned_key(
        node_factory: NodeFactory, store_url: str, tmp_path: Path) -> None:
    """Whoever can write the database can publish a key of their own beside the node's,
    then rewrite, re-hash and re-sign the log with it: every event is then signed by a
    published key. `audit --verify --key <the node's key, kept elsewhere>` fails at the
    first re-signed event; the untouched log passes with the same pin."""
    node = await node_factory(database=store_url)
    await _decide(node, Scope.DENY, Scope.ONCE)
    [published] = await node.store.signing_keys()
    pinned = tmp_path / "node.pub"
    pinned.write_text(published.public_key + "\n")
    ok = _cli("audit", "--verify", "--database", store_url, "--key", str(pinned), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    events = await node.store.audit_chain(after=0, limit=100)
    forger = KeySigner(Ed25519PrivateKey.generate(), node_id="node-b")
    await node.store.publish_key(PublicKey(kid=forger.kid, public_key=forger.public_key(""),
                                           node_id="node-b", created_at=AT, since=1))
    _rewrite(store_url, events, forger)
    assert (await _verify(store_url)).ok  # every signature is a published key's
    broken = _cli("audit", "--verify", "--database", store_url, "--key", published.public_key,
                  cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout
    assert "BROKEN at event 3" in broken.stderr
    assert f"signed by key {forger.kid}, which is not one of the keys you trust" \
        in broken.stderr
    bad = _cli("audit", "--verify", "--database", store_url, "--key", "not-a-key",
               cwd=tmp_path)
    assert bad.returncode == 2 and "not a base64url Ed25519 public key" in bad.stderr


def test_an_unsigned_event_after_signing_began_is_reported() -> None:
    """A chain whose keys are published but whose later event carries no signature fails
    (a forger cannot simply strip signatures from what was signed)."""
    signer = KeySigner(Ed25519PrivateKey.generate())
    sealer = audit.Sealer(signer)
    sealed, keys = sealer.seal([AuditEvent(kind="decision"), AuditEvent(kind="decision")],
                               count=0, prev=audit.GENESIS, at=AT)
    stripped = audit.seal(sealed[1], event_id=2, prev_hash=sealed[0].hash)
    signatures = audit.Signatures.of(keys)
    assert signatures.problem(sealed[0]) is None and signatures.problem(sealed[1]) is None
    assert "is not signed" in (signatures.problem(stripped) or "")


async def test_each_node_signs_with_its_own_key_and_every_key_is_published(
        node_factory: NodeFactory, store_url: str, tmp_path: Path) -> None:
    """Two nodes on one database, each with its own state dir: each signs with its own
    key, both keys are listed, and the shared log verifies."""
    first = await node_factory({"daemon": {"state_dir": str(tmp_path / "state-a")}},
                               database=store_url)
    second = await node_factory({"daemon": {"state_dir": str(tmp_path / "state-b")}},
                                database=store_url)
    one, = await _decide(first, Scope.ONCE)
    two, = await _decide(second, Scope.DENY)
    kids = {(await receipts.receipt(n.store, a))["kid"] for n, a in ((first, one), (second, two))}
    assert len(kids) == 2
    listed = await first.store.signing_keys()
    assert {k.kid for k in listed} == kids and len({k.node_id for k in listed}) == 2
    result = await _verify(store_url)
    assert result.ok and result.signed == result.count, result.problem
