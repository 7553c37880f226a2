"""A tiny name -> callable registry (the only kind of global state the algorithms package allows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from ares_cli.errors import UsageError

__all__ = ["Registry"]

T = TypeVar("T", bound=Callable)


class Registry(Generic[T]):
    """Maps names to implementations of one ``kind`` (e.g. "advantage estimator").

    ``register(name)`` is a decorator; registering a name twice is an error, and looking up an unknown
    name raises :class:`~ares_cli.errors.UsageError` listing every valid name.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def deco(fn: T) -> T:
            if name in self._items:
                raise ValueError(f"duplicate {self.kind} name {name!r}")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none registered)"
            raise UsageError(f"unknown {self.kind} {name!r}; valid names: {valid}") from None

    __getitem__ = get

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
