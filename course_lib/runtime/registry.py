"""One registry type for everything a run names: fine-tuning methods, task families, task presets and
pre-training objectives.

Built-in entries are declared as builders and built, their modules imported, the first time a run asks for
one: a run on SST-2 loads the sentence family, never SQuAD's reader. A builder either makes one entry whose name
is known beforehand (a method, a family) or a group of entries named only once built (a module's task
presets). `every()` builds them all, the built-in ones first in their declared order. A second, different
entry under a name already taken (a built-in's too) is refused, so a name always means one thing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from course_lib.runtime.errors import UsageError, choice_error, find_named, name_key

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries with a `.name` (and, where they take options, an `.options` dataclass), by name.

    `loose`: names compare ignoring case and dashes ('SST-2' is 'sst2'), for task presets."""

    def __init__(self, kind: str, named: dict[str, Callable[[], T]] | None = None,
                 groups: Iterable[Callable[[], Iterable[T]]] = (), loose: bool = False):
        self.kind, self.loose = kind, loose
        self._named, self._groups = dict(named or {}), list(groups)
        self.builtin_names: list[str] = list(self._named)  # built-in names in their declared order (groups add theirs)
        self.loaded: dict[str, T] = {}

    def register(self, entry: T) -> T:
        """Add a user's entry; one whose name a built-in holds is refused unless it is that very entry."""
        if entry.name in self._named:
            self.get(entry.name)
        self._load_groups(until=lambda: False)
        return self._add(entry)

    def get(self, name: str) -> T:
        """The entry of that name, built on first use; else the one-line error that lists the valid names."""
        if name not in self.loaded and name in self._named:
            self._add(self._named[name]())
        if self.loose:
            self._load_groups(until=lambda: self._known(name))
            return find_named(self.kind, name, self.loaded if self._known(name) else self.every())
        if name not in self.loaded:
            raise choice_error(self.kind, name, self.every())
        return self.loaded[name]

    def find(self, name: str) -> T | None:
        """The entry of that name, or None (a results table reading a run of a task it does not know)."""
        try:
            return self.get(name)
        except UsageError:
            return None

    def every(self) -> dict[str, T]:
        """Every entry, the built-in ones first in their declared order (building those not built yet)."""
        for name in self._named:
            self.get(name)
        self._load_groups(until=lambda: False)
        return {**{name: self.loaded[name] for name in self.builtin_names if name in self.loaded}, **self.loaded}

    def __contains__(self, name: str) -> bool:
        """Whether an entry of that name is built already (asking builds nothing)."""
        return name in self.loaded

    def pop(self, name: str, *default):
        """Take a user's entry out again (a benchmark's stand-in method, once measured), as `dict.pop`."""
        return self.loaded.pop(name, *default)

    def option_readers(self) -> dict[str, str]:
        """{option: the entries that read it}, e.g. {"asa_tau": "method asa"}: what a run says of a key that
        belongs to another method or family (`Settings.foreign`)."""
        readers: dict[str, list[str]] = {}
        for name, entry in self.every().items():
            for option in entry.options.model_fields:
                readers.setdefault(option, []).append(name)
        return {option: f"{self.kind} " + ", ".join(names) for option, names in readers.items()}

    def _known(self, name: str) -> bool:
        return any(name_key(entry) == name_key(name) for entry in self.loaded) if self.loose else name in self.loaded

    def _load_groups(self, until: Callable[[], bool]) -> None:
        while self._groups and not until():
            for entry in self._groups.pop(0)():
                self._add(entry)
                self.builtin_names.append(entry.name)

    def _add(self, entry: T) -> T:
        if self.loaded.get(entry.name, entry) is not entry:
            raise ValueError(f"a {self.kind} named {entry.name!r} is registered already")
        self.loaded[entry.name] = entry
        return entry
