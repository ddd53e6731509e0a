"""scripts/replay_check.py's record comparison: counters by name, a counter only the working tree
has (added by a hardware change) is reported apart, everything else that differs is a diff."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "replay_check", Path(__file__).resolve().parent.parent / "scripts" / "replay_check.py")
replay_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_check)


def test_added_counter_is_not_a_difference():
    base = {"a": {"cycles": 10, "counters": {"cycles": 10, "mxu_retired": 2}}}
    new = {"a": {"cycles": 10, "counters": {"cycles": 10, "mxu_retired": 2, "mxu_queue_full_cycles": 3}}}
    added: set = set()
    assert replay_check.compare(base, new, added) == []
    assert added == {"mxu_queue_full_cycles"}


def test_changed_or_removed_counter_and_field_are_differences():
    base = {"a": {"cycles": 10, "counters": {"cycles": 10, "mxu_retired": 2}}, "b": {}}
    new = {"a": {"cycles": 11, "counters": {"cycles": 11}}}
    assert replay_check.compare(base, new) == [
        "a: counter cycles 10 -> 11", "a: counter mxu_retired 2 -> None", "a: cycles 10 -> 11",
        "b: only in the ref"]
