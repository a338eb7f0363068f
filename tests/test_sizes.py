"""Counts as people read them (wmx.sizes): byte sizes and counted nouns."""
from wmx.sizes import counted, human_size, noun_for


def test_counted_takes_the_singular_only_for_one():
    assert counted(1, "task") == "1 task"
    assert counted(2, "task") == "2 tasks"
    assert counted(0, "episode") == "0 episodes"
    assert counted(1, "eval_mode episode") == "1 eval_mode episode"
    assert counted(3, "entry", "entries") == "3 entries"
    assert counted(1, "entry", "entries") == "1 entry"


def test_noun_for_is_counted_without_the_number():
    assert [noun_for(n, "task") for n in (0, 1, 2)] == ["tasks", "task", "tasks"]
    assert noun_for(1, "is", "are") == "is" and noun_for(3, "is", "are") == "are"
    assert all(counted(n, "entry", "entries") == f"{n} {noun_for(n, 'entry', 'entries')}"
               for n in (0, 1, 2))


def test_human_size_picks_the_unit():
    assert human_size(512) == "512 B"
    assert human_size(1536) == "1.5 KiB"
    assert human_size(3 * 1024 ** 2) == "3.0 MiB"
    assert human_size(5 * 1024 ** 5) == "5120.0 TiB"
