"""The trainers' --help: each flag states its default once, and only where it says something."""
import pytest

from wmx.runs.cli_common import HelpFormatter


def _parsers():
    import argparse

    from wmx.cli import demo
    from wmx.train_offline.cli import build_parser as offline
    from wmx.train_online.cli import build_parser as online
    sub = argparse.ArgumentParser(prog="wmx").add_subparsers()
    demo.add_parser(sub)
    return {"train_online": online(), "train_offline": offline(),
            "demo": sub.choices["demo"]}


@pytest.mark.parametrize("name", ["train_online", "train_offline", "demo"])
def test_each_flag_states_its_default_at_most_once_and_never_none(name):
    parser = _parsers()[name]
    fmt = parser._get_formatter()
    assert isinstance(fmt, HelpFormatter)
    for action in parser._actions:
        text = fmt._get_help_string(action) % {"default": action.default, "prog": parser.prog} \
            if action.help else ""
        assert text.lower().count("default") <= 1, (action.option_strings, text)
        assert "(default: None)" not in text and "(default: [])" not in text, text
        assert "(default: False)" not in text, text
    help_text = parser.format_help()
    assert "(default: None)" not in help_text and "None: " not in help_text


def test_a_plain_default_is_still_shown():
    import argparse
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--updates", type=int, default=100, help="gradient updates")
    p.add_argument("--home", default=None, help="data root")
    p.add_argument("--batch", type=int, default=8, help="items (default: the preset's)")
    text = " ".join(p.format_help().split())
    assert "gradient updates (default: 100)" in text
    assert "data root" in text and "data root (default" not in text
    assert "items (default: the preset's)" in text and "(default: 8)" not in text
