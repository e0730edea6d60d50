"""`signoff receipt` and `signoff keys`: signed receipts of decisions, and the keys.

    signoff receipt ID [--reveal] [--config PATH]   one decision's receipt (JSON); --reveal
                                                    adds the args it approved, provably
    signoff receipt verify FILE --key PUBKEY        check a receipt offline (exit 0/1)
    signoff keys [--json] [--config PATH]           the published public keys
    signoff keys rotate [--config PATH]             a new key for this node; the old one
                                                    stays published, marked retired

ID is an audit event number or an approval id (see `signoff.runtime.receipts`). Like
`signoff audit`, these read the daemon's database directly; ``receipt verify`` reads
nothing but the file and the key. ``cli/main.py`` calls `register(app)`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from signoff.cli.app import ConfigOpt, DatabaseOpt, WorkDirOpt, fail, load
from signoff.cli.audit import open_store
from signoff.config.settings import Settings
from signoff.errors import BadArguments, SignoffError
from signoff.runtime import receipts, signing
from signoff.runtime.clock import system_now
from signoff.runtime.state import ensure_private_dir

MAX_RECEIPT = 1024 * 1024  # a receipt is a few KiB; refuse to read a huge file whole


def settings_of(config: Path | None) -> Settings:
    """The settings of ``--config`` (errors exit 2, as every command's do)."""
    settings: Settings = load(config)
    return settings


def read_key_arg(text: str) -> str:
    """The base64url public key given to --key: the key itself, or a file holding it."""
    path = Path(text)
    if len(text) < 200 and path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")[:200].strip()
    return text.strip()


def verify_file(path: Path, key: str) -> int:
    """Check the receipt in ``path`` against ``key``; print the verdict; the exit code."""
    try:
        with path.open("rb") as fh:
            text = fh.read(MAX_RECEIPT + 1)
    except OSError as exc:
        raise BadArguments(f"cannot read the receipt {path}: {exc.strerror or exc}") from exc
    result = receipts.check(text, read_key_arg(key))
    if result.problem is None:
        typer.echo(f"ok: {result.summary()}")
        return 0
    typer.secho(f"receipt NOT valid: {result.problem}", fg=typer.colors.RED, err=True)
    return 1


async def show_receipt(settings: Settings, ident: str, *, work_dir: Path | None,
                       database: str | None, reveal: bool = False) -> int:
    """Print the receipt of the decision ``ident`` names."""
    store = await open_store(settings, work_dir=work_dir, database=database)
    try:
        body = await receipts.receipt(store, ident, reveal=reveal)
    finally:
        await store.close()
    typer.echo(json.dumps(body, indent=2, ensure_ascii=False))
    return 0


async def list_keys(settings: Settings, *, as_json: bool, work_dir: Path | None,
                    database: str | None) -> int:
    """Print the published keys (this node's current one marked)."""
    store = await open_store(settings, work_dir=work_dir, database=database)
    try:
        keys = await store.signing_keys()
    finally:
        await store.close()
    if as_json:
        typer.echo(json.dumps({"keys": [k.public() for k in keys]}, indent=2))
        return 0
    if not keys:
        typer.echo("no published keys (a node publishes its key with the first event it signs)")
        return 0
    for k in keys:
        state = f"retired {k.retired_at:%Y-%m-%d %H:%M}" if k.retired_at else "active"
        typer.echo(f"{k.kid}  {k.public_key}  {k.node_id}  {state}")
    return 0


async def rotate_key(settings: Settings, *, work_dir: Path | None, database: str | None) -> int:
    """Give this node a new key: published first, the old one marked retired, then the
    key file replaced (so no event is ever signed by a key the database does not list)."""
    from signoff.wiring import node_id

    state = settings.resolved_state_dir(work_dir)
    ensure_private_dir(state)
    node = node_id(settings, state)
    old = signing.held_key(state, node_id=node)
    data = signing.new_key_bytes()
    fresh = signing.signer_of(data, node_id=node)
    store = await open_store(settings, work_dir=work_dir, database=database)
    try:
        now = system_now()
        count, _ = await store.audit_head()
        await store.publish_key(signing.PublicKey(kid=fresh.kid, public_key=fresh.public_key(""),
                                                  node_id=node, created_at=now, since=count + 1))
        if old is not None:
            await store.publish_key(signing.PublicKey(
                kid=old.kid, public_key=old.public_key(""), node_id=node, created_at=now,
                since=count + 1))
            await store.retire_key(old.kid, now)
        signing.install_key(state, data)
    finally:
        await store.close()
    typer.echo(f"new key {fresh.kid} {fresh.public_key('')}"
               + (f"; {old.kid} retired (still published)" if old else ""))
    return 0


def register(app: typer.Typer) -> None:
    """Add `receipt` and `keys` to the CLI."""
    app.command("receipt")(receipt)
    app.command("keys")(keys)


def receipt(
    what: Annotated[str, typer.Argument(
        metavar="ID|verify", help="An audit event number or approval id; or `verify`.")],
    file: Annotated[Path | None, typer.Argument(help="With `verify`: the receipt file.")] = None,
    key: Annotated[str | None, typer.Option(
        help="With `verify`: the trusted public key (base64url), or a file holding it.")] = None,
    reveal: Annotated[bool, typer.Option(
        "--reveal", help="Add the args the decision was about and the key that proves "
                         "them (whoever gets the receipt then reads them).")] = False,
    config: ConfigOpt = None, work_dir: WorkDirOpt = None, database: DatabaseOpt = None,
) -> None:
    """Print one decision's signed receipt, or verify a receipt offline (exit 0/1).

    A receipt pins the args of the action without showing them; with --reveal it also
    carries them, and `verify` checks they are the ones the decision was about."""
    try:
        if what == "verify":
            if file is None or key is None:
                fail("usage: signoff receipt verify FILE --key PUBKEY")
            raise typer.Exit(verify_file(file, key))
        code = asyncio.run(show_receipt(settings_of(config), what, work_dir=work_dir,
                                        database=database, reveal=reveal))
    except SignoffError as exc:
        fail(str(exc))
    raise typer.Exit(code)


def keys(
    action: Annotated[str | None, typer.Argument(
        metavar="[rotate]", help="`rotate`: a new key for this node.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON (a JWK set).")] = False,
    config: ConfigOpt = None, work_dir: WorkDirOpt = None, database: DatabaseOpt = None,
) -> None:
    """List the nodes' public signing keys (Ed25519, base64url), or rotate this node's."""
    if action not in (None, "rotate"):
        fail(f"unknown action {action!r}: use `signoff keys` or `signoff keys rotate`")
    settings = settings_of(config)
    try:
        if action == "rotate":
            code = asyncio.run(rotate_key(settings, work_dir=work_dir, database=database))
        else:
            code = asyncio.run(list_keys(settings, as_json=as_json, work_dir=work_dir,
                                         database=database))
    except SignoffError as exc:
        fail(str(exc))
    raise typer.Exit(code)
