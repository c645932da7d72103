"""The one registry type (course_lib/runtime/registry.py) on toy entries: built on first use, a name means one thing,
the one-line error lists the valid names, loose names for task presets, and who reads an option."""
from dataclasses import dataclass, field

import pytest

from course_lib.runtime.errors import UsageError
from course_lib.runtime.registry import Registry
from course_lib.runtime.settings import Settings


class Options(Settings):
    shared: int = 0


class MoreOptions(Options):
    own: float = 1.0


@dataclass(frozen=True)
class Entry:
    name: str
    options: type = Options
    built: list = field(default_factory=list, compare=False)


def test_a_built_in_is_built_once_on_first_use_and_every_lists_built_ins_first():
    calls = []
    registry = Registry("toy", {name: (lambda name=name: calls.append(name) or Entry(name)) for name in ("b", "a")})
    assert calls == [] and "b" not in registry  # declaring builds nothing
    first = registry.get("b")
    assert registry.get("b") is first and calls == ["b"]
    mine = registry.register(Entry("mine"))
    assert list(registry.every()) == ["b", "a", "mine"] and calls == ["b", "a"]  # declared order, then users'
    assert registry.pop("mine") is mine and "mine" not in registry and registry.pop("mine", None) is None


def test_a_taken_name_is_refused_a_built_ins_too_and_an_unknown_one_lists_the_valid_names():
    registry = Registry("toy", {"a": lambda: Entry("a")})
    with pytest.raises(ValueError, match="a toy named 'a' is registered already"):
        registry.register(Entry("a"))  # the built-in is built first, so the clash shows now
    again = registry.get("a")
    assert registry.register(again) is again  # the same entry twice is no clash
    with pytest.raises(UsageError, match=r"unknown toy 'b' \(valid: a\)"):
        registry.get("b")
    assert registry.find("b") is None and registry.find("a") is again


def test_grouped_built_ins_load_only_until_a_loose_name_is_found():
    loaded = []

    def group(*names):
        return lambda: loaded.append(names) or [Entry(n) for n in names]

    registry = Registry("task", groups=[group("sst2", "cola"), group("squad"), group("wnut17")], loose=True)
    assert registry.get("SST-2").name == "sst2" and loaded == [("sst2", "cola")]  # case and dashes ignored
    assert registry.get("squad").name == "squad" and loaded == [("sst2", "cola"), ("squad",)]
    with pytest.raises(UsageError, match="sst3"):
        registry.get("sst3")
    assert loaded[-1] == ("wnut17",) and list(registry.every()) == ["sst2", "cola", "squad", "wnut17"]


def test_option_readers_name_every_entry_that_reads_an_option():
    registry = Registry("method", {"plain": lambda: Entry("plain"), "rich": lambda: Entry("rich", MoreOptions)})
    assert registry.option_readers() == {"shared": "method plain, rich", "own": "method rich"}
