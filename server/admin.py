"""The store's commands: `b3os-infer keys create|list|revoke` and `b3os-infer usage`, on the
store a server uses (`--db`, or `B3OS_INFER_DB`). A new key is printed once, on standard output
(so `KEY=$(b3os-infer keys create ...)` keeps it); everything else goes to standard error."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from server.auth.keys import new_key, parse
from server.store.base import SCOPES, KeyRecord
from server.store.sqlite import SqliteStore


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_store_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The commands, each given the store option by `add_store_option`."""
    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="a new key, printed once")
    create.add_argument("--org", required=True, help="the organization it acts for")
    create.add_argument("--project", required=True, help="the project it belongs to")
    create.add_argument(
        "--scopes",
        default=",".join(SCOPES),
        help=f"comma-separated, of {', '.join(SCOPES)} (default both)",
    )
    create.add_argument("--expires-in-days", type=float, help="default: never")
    create.add_argument(
        "--spend-cap-tokens",
        type=int,
        help="input and output tokens the key may use over its life (default: no cap)",
    )
    listing = actions.add_parser("list", help="the keys, without their secrets")
    listing.add_argument("--org", help="one organization's only")
    revoke = actions.add_parser("revoke", help="a key stops working at once")
    revoke.add_argument("key_id", help="key_... as `keys list` shows it")
    usage = commands.add_parser("usage", help="metered tokens by organization, project, key")
    usage.add_argument("--org", help="one organization's only")
    usage.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    for command in (create, listing, revoke, usage):
        add_store_option(command)


def run(args: argparse.Namespace, db: Path | None) -> int:
    if db is None:
        print("no store: give --db or set B3OS_INFER_DB", file=sys.stderr)
        return 2
    try:
        store = SqliteStore(db)
    except sqlite3.Error as error:
        print(f"{db}: {error}", file=sys.stderr)
        return 1
    try:
        if args.command == "usage":
            return _usage(store, args)
        return {"create": _create, "list": _list, "revoke": _revoke}[args.action](store, args)
    finally:
        store.close()


def _create(store: SqliteStore, args: argparse.Namespace) -> int:
    scopes = tuple(scope.strip() for scope in args.scopes.split(",") if scope.strip())
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        print(f"--scopes: choose from {', '.join(SCOPES)}", file=sys.stderr)
        return 2
    now = time.time()
    expires = None if args.expires_in_days is None else now + args.expires_in_days * 86400
    text = new_key()
    parsed = parse(text)
    store.add_key(
        KeyRecord(
            parsed.key_id,
            parsed.hash,
            args.org,
            args.project,
            scopes,
            now,
            expires,
            args.spend_cap_tokens,
        )
    )
    print(text)
    print(
        f"{parsed.key_id}: org {args.org}, project {args.project}, scopes {','.join(scopes)}, "
        f"expires {_when(expires)}, spend cap {args.spend_cap_tokens or 'none'}. "
        "This key is shown once: keep it now.",
        file=sys.stderr,
    )
    return 0


def _list(store: SqliteStore, args: argparse.Namespace) -> int:
    rows = [("key", "org", "project", "scopes", "created", "expires", "cap", "spent", "state")]
    for key in store.keys(args.org):
        state = "revoked" if key.revoked_at else "active"
        if key.expires_at is not None and key.expires_at <= time.time():
            state = "expired"
        rows.append(
            (
                key.key_id,
                key.org,
                key.project,
                ",".join(key.scopes),
                _when(key.created),
                _when(key.expires_at),
                str(key.spend_cap_tokens or "-"),
                str(store.key_spend(key.key_id)),
                state,
            )
        )
    _table(rows)
    return 0


def _revoke(store: SqliteStore, args: argparse.Namespace) -> int:
    if store.revoke_key(args.key_id):
        print(f"{args.key_id} revoked", file=sys.stderr)
        return 0
    print(f"no active key {args.key_id}", file=sys.stderr)
    return 1


def _usage(store: SqliteStore, args: argparse.Namespace) -> int:
    totals = store.usage_totals(args.org)
    if args.json:
        for total in totals:
            print(json.dumps(dataclasses.asdict(total)))
        return 0
    rows = [("org", "project", "key", "model", "requests", "input tokens", "output tokens")]
    for t in totals:
        rows.append(
            (
                t.org,
                t.project,
                t.key_id or "-",
                t.model,
                str(t.requests),
                str(t.input_tokens),
                str(t.output_tokens),
            )
        )
    _table(rows)
    return 0


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "never"
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
