"""People by name: what cards, team lines and the console show for an actor key.

A `[[people]]` name wins (``slack:U1`` → ``alice``). Otherwise the name the chat platform
gave for that account is shown — Slack's ``users.info`` (display name, else real name),
Telegram's ``from`` (username, else first and last name), Discord's and Teams' names —
learned when the person answers a card. Anyone never seen is shown by the key itself.
The audit log always keeps the key: these names are for reading only.

Learned names live in a small cache (`TtlCache`): at most ``size`` entries, each for
``ttl`` on the injected Clock, so a renamed account reads right again within a day and
a flood of clicks from new accounts cannot grow memory. It is per process: another node
of a cluster shows the key until it sees that person answer too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from signoff.runtime.clock import Clock
from signoff.runtime.people import NOBODY_LISTED, People
from signoff.runtime.text import shown

V = TypeVar("V")

NAME_LIMIT = 64  # characters of a learned name (a chat name is chosen by its owner)


class ShowsNames(Protocol):
    """Anything that shows actor keys as names (`People`, `Names`)."""

    def name(self, actor: str) -> str:
        """What cards and lines show for ``actor``."""
        ...

    def names(self, actors: Iterable[str]) -> list[str]:
        """The names behind ``actors``, each once, in order."""
        ...


class TtlCache(Generic[V]):
    """A bounded map whose entries lapse ``ttl`` after they were put (Clock time)."""

    def __init__(self, clock: Clock, *, size: int = 1000,
                 ttl: timedelta = timedelta(hours=24)) -> None:
        if size < 1:
            raise ValueError("a cache holds at least one entry")
        self.clock, self.size, self.ttl = clock, size, ttl
        self._items: OrderedDict[str, tuple[datetime, V]] = OrderedDict()

    def get(self, key: str) -> V | None:
        """The value put under ``key`` within ``ttl``, else None."""
        found = self._items.get(key)
        if found is None:
            return None
        if self.clock.now() >= found[0]:
            del self._items[key]
            return None
        return found[1]

    def put(self, key: str, value: V) -> None:
        """Keep ``value`` (the oldest entry goes when full)."""
        self._items.pop(key, None)
        self._items[key] = (self.clock.now() + self.ttl, value)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class Names:
    """`[[people]]` names first, then the chat names learned from the surfaces."""

    def __init__(self, clock: Clock, people: People = NOBODY_LISTED, *, size: int = 1000,
                 ttl: timedelta = timedelta(hours=24)) -> None:
        self.people = people
        self._learned: TtlCache[str] = TtlCache(clock, size=size, ttl=ttl)

    def learn(self, actor: str, display: str | None) -> None:
        """Remember the platform's name for ``actor`` (ignored when empty)."""
        text = " ".join(shown(display or "").split())[:NAME_LIMIT]
        if text and text != actor:
            self._learned.put(actor, text)

    def name(self, actor: str) -> str:
        """The person's `[[people]]` name, else the learned chat name, else the key."""
        listed = self.people.name(actor)
        if listed != actor:
            return listed
        return self._learned.get(actor) or actor

    def names(self, actors: Iterable[str]) -> list[str]:
        """The names behind ``actors``, each once, in order."""
        return list(dict.fromkeys(self.name(a) for a in actors))
