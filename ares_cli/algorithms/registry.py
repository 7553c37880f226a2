"""Registries by name: each name declared once, with its own properties, and checked when a config resolves.

A :class:`Registry` holds the entries of one kind ("policy loss", "advantage estimator", "loss aggregation",
"RL algorithm"). An :class:`Entry` is the name, its implementation (a callable or class, or a lazy
``"module:attr"`` target imported on first use), a one-line summary for ``--help`` and ``docs/config.md``, and
the properties its kind declares (a subclass of :class:`Entry`: the constants a loss reads, whether it takes
statistics over the micro-batch, an algorithm's preset, ...). Everything else (the config's choices, the
micro-batch planner, the docs, the CLI help) reads the registry instead of keeping its own list.

Built-in entries are declared where they are defined, with the ``register`` decorator. A registry names
the modules that hold its built-ins (``providers``) and imports them on its first lookup, so no module has
to import another for its names to exist; a new module of built-ins is added to that tuple (a test fails
when a module registers entries without being listed). Code outside the package registers the same way,
before the config resolves: ``@POLICY_LOSSES.register("my_loss", reads=("clip_high",))``.

Registering a name twice is an error; an unknown name is a :class:`~ares_cli.errors.UsageError` (exit 2)
that lists every registered name and the closest one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ares_cli.config import did_you_mean
from ares_cli.errors import UsageError

__all__ = ["Entry", "Registry"]


@dataclass(frozen=True)
class Entry:
    """One registered name. ``target`` is the implementation or a ``"module:attr"`` string."""

    name: str
    target: Any
    summary: str = ""

    def load(self) -> Any:
        """The implementation (a ``"module:attr"`` target is imported here, on first use)."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


E = TypeVar("E", bound=Entry)


class Registry(Generic[E]):
    """Names -> entries of one ``kind``; ``entry`` is the kind's :class:`Entry` subclass.

    ``providers``: modules that register this kind's built-ins, imported on the first lookup."""

    def __init__(self, kind: str, *, entry: type[E] = Entry, providers: tuple[str, ...] = ()):
        self.kind, self.entry_type, self.providers = kind, entry, providers
        self._entries: dict[str, E] = {}
        self._loaded = not providers

    def register(self, name: str, target: Any = None, **properties: Any) -> Any:
        """Register ``target`` under ``name`` with the entry's ``properties`` (``summary`` included).

        Without ``target`` it is a decorator: ``@REGISTRY.register("name", ...)`` over the function or class."""
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if target is None:

            def deco(obj: Any) -> Any:
                self._add(self.entry_type(name=name, target=obj, **properties))
                return obj

            return deco
        self._add(self.entry_type(name=name, target=target, **properties))
        return target

    def _add(self, entry: E) -> None:
        if entry.name in self._entries:
            raise ValueError(f"duplicate {self.kind} name {entry.name!r}")
        self._entries[entry.name] = entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a registration made by a test or a notebook)."""
        self._ensure_loaded()
        self._entries.pop(name, None)

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True  # before the imports: they call register(), which must not recurse here
            for module in self.providers:
                importlib.import_module(module)

    def entry(self, name: str) -> E:
        """The entry of ``name``; a UsageError listing the registered names if there is none."""
        self._ensure_loaded()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            names = self.names()
            valid = ", ".join(names) or "(none registered)"
            raise UsageError(
                f"unknown {self.kind} {name!r}; valid: {valid}{did_you_mean(name, names)}"
            ) from None

    def get(self, name: str) -> Any:
        """The implementation registered as ``name``."""
        return self.entry(name).load()

    __getitem__ = get

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted(self._entries)

    def entries(self) -> list[E]:
        """Every entry, sorted by name."""
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
