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


def _subparsers(parser):
    """(prog, parser) of ``parser`` and of each subcommand under it, depth first."""
    import argparse
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _subparsers(child)


def test_every_wmx_positional_says_what_it_is():
    """`wmx ... --help` documents each positional argument (`wmx dataset ls NAME` included)."""
    import argparse

    from wmx.cli.main import build_parser
    seen, parsers = set(), dict(_subparsers(build_parser()))
    for prog, parser in parsers.items():
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                seen.add(f"{prog} {action.metavar or action.dest}")
                assert action.help, f"{prog}: positional {action.dest} has no help"
    assert "wmx dataset ls NAME" in seen and "wmx dataset info ref" in seen
    assert "only the datasets named NAME" in parsers["wmx dataset ls"].format_help()


@pytest.mark.parametrize("argv, prog, msg", [
    (["train_online", "--env-steps", "abc"], "train_online", "'abc' is not an integer"),
    (["train_offline", "--updates", "1.5"], "train_offline", "'1.5' is not a whole number"),
    (["evaluate"], "evaluate", "one of the arguments --run --runs is required"),
    (["wmx", "demo", "--updates", "0"], "wmx demo", "0 must be at least 1"),
    (["wmx", "dataset", "validate"], "wmx dataset validate", "arguments are required: ref"),
    (["wmx"], "wmx", "arguments are required: {dataset,runs,demo}"),
    (["wmx", "runs"], "wmx runs", "arguments are required: {ls,info}"),
    (["wmx", "demo", "--updatez", "5"], "wmx demo", "unrecognized arguments: --updatez 5"),
    (["wmx", "dataset", "ls", "--bogus"], "wmx dataset ls", "unrecognized arguments: --bogus"),
    (["wmx", "dataset", "--bogus", "ls"], "wmx dataset", "unrecognized arguments: --bogus"),
])
def test_a_usage_error_is_one_line_naming_the_problem_and_help(argv, prog, msg, capsys):
    """Every wmx command's parser (and its subcommands') answers bad flags with exit status 2
    and one line on stderr, without argparse's usage block."""
    from wmx.cli.main import main as wmx_main
    from wmx.evaluate.cli import build_parser as evaluate
    from wmx.train_offline.cli import build_parser as offline
    from wmx.train_online.cli import build_parser as online
    parse = {"train_online": online().parse_args, "train_offline": offline().parse_args,
             "evaluate": evaluate().parse_args, "wmx": wmx_main}[argv[0]]
    with pytest.raises(SystemExit) as info:
        parse(argv[1:])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: ") and err.endswith(f" (see {prog} --help)\n")
    assert msg in err and "usage:" not in err


@pytest.mark.parametrize("prog", ["train_online", "train_offline", "evaluate"])
@pytest.mark.parametrize("argv", [["--config"], ["--config", "--no-such-flag"]])
def test_config_without_its_file_is_the_command_s_own_one_line_error(prog, argv, capsys):
    """`--config` with no value is caught by the command's parser, not by the pre-parser that
    looks for the file (which printed a usage block under the interpreter's name)."""
    import importlib
    from wmx.runs.config_file import parse_with_config
    parser = importlib.import_module(f"wmx.{prog}.cli").build_parser()
    with pytest.raises(SystemExit) as info:
        parse_with_config(parser, argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err == (f"{prog}: error: argument --config: expected one argument "
                   f"(see {prog} --help)\n")


def test_jax_backend_probing_is_not_logged_by_the_commands(caplog):
    """The commands log INFO, but not JAX's "Unable to initialize backend 'tpu'" line that
    every machine without a TPU would print."""
    import logging

    from wmx.runs.cli_common import configure_logging
    bridge = logging.getLogger("jax._src.xla_bridge")
    before = bridge.level
    try:
        configure_logging()
        with caplog.at_level(logging.INFO):
            bridge.info("Unable to initialize backend 'tpu': test")
            logging.getLogger("wmx.test").info("a wmx line")
        assert [r.getMessage() for r in caplog.records] == ["a wmx line"]
    finally:
        bridge.setLevel(before)
