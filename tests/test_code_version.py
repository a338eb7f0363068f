"""wmx.version.code_version: git where there is a checkout, WMX_CODE_VERSION in a copy
without .git (the working tree sent to a device machine), never the variable over git."""
import re

from wmx import version


def test_a_copy_without_git_reads_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(version, "REPO_ROOT", tmp_path)      # no .git here
    monkeypatch.setenv(version.CODE_VERSION_ENV, " " + "a" * 40 + " ")
    assert version.code_version() == "a" * 40
    monkeypatch.delenv(version.CODE_VERSION_ENV)
    assert not re.fullmatch(r"[0-9a-f]{40}(-dirty)?", version.code_version())


def test_git_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv(version.CODE_VERSION_ENV, "b" * 40)
    got = version.code_version()
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", got) and not got.startswith("b" * 40)


def test_device_label_names_the_platform_and_kind():
    """Tests run on JAX's CPU backend (the Makefile pins it): "<platform>: <kind>"."""
    from wmx.version import device_label
    assert device_label() == "cpu: cpu"
