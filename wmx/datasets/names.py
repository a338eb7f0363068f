"""Artifact names: ``name@<hex prefix>``, ``name@latest`` (DESIGN.md §4).

Pure string handling; the store (wmx.datasets.store) matches a parsed name
against what is on disk.
"""
from __future__ import annotations

import dataclasses
import re

MIN_PREFIX_LEN = 8
LATEST = "latest"
NAME_MAX = 100
"""Longest dataset name: it is a folder name, and staging names add ~60 characters."""
_HEX = re.compile(r"^[0-9a-f]+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class NameResolutionError(ValueError):
    """A name matches no artifact, or several. ``candidates`` lists what the
    store holds that the user could have meant (names or name@hash strings)."""

    def __init__(self, message: str, candidates: list[str] | None = None):
        super().__init__(message)
        self.candidates = list(candidates or [])


@dataclasses.dataclass(frozen=True)
class ArtifactRef:
    """A parsed ``name@version``: version is "latest" or a lowercase hex
    prefix of at least MIN_PREFIX_LEN digits."""
    name: str
    version: str

    @property
    def is_latest(self) -> bool:
        return self.version == LATEST

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


def check_dataset_name(name: str, example: str = "mt80-synth") -> str:
    """A name a new dataset may be stored under (``<home>/datasets/<name>/``).

    Args:
      name: e.g. "mt19", "mt19-3fa2c1d0", "mt80-synth".
      example: the valid name the error shows (one the caller would accept).

    Returns:
      ``name`` unchanged.

    Raises:
      ValueError: not letters, digits, '.', '_' and '-' starting with a letter or digit,
        or longer than NAME_MAX.
    """
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > NAME_MAX:
        raise ValueError(f"dataset name {name!r} is not valid: use up to {NAME_MAX} letters, "
                         "digits, '.', '_' and '-', starting with a letter or digit "
                         f"(e.g. {example})")
    return name


def looks_like_ref(text: str) -> bool:
    """True when ``text`` has the ``name@version`` shape (one '@', no '/')."""
    return text.count("@") == 1 and "/" not in text and "\\" not in text


def parse_ref(text: str) -> ArtifactRef:
    """Parse ``name@<hex>`` or ``name@latest``.

    The hex part is case-insensitive and must have at least 8 digits
    (MIN_PREFIX_LEN). Raises NameResolutionError explaining the expected form.
    """
    if not isinstance(text, str) or not looks_like_ref(text):
        raise NameResolutionError(
            f"{text!r} is not a name like mt19@3fa2c1d0 or mt19@latest")
    name, version = text.split("@")
    if not name:
        raise NameResolutionError(f"{text!r} has an empty name before '@'")
    version = version.lower()
    if version == LATEST:
        return ArtifactRef(name, LATEST)
    if not _HEX.match(version):
        raise NameResolutionError(
            f"{text!r}: the part after '@' must be hex digits of a content hash "
            "or 'latest'")
    if len(version) < MIN_PREFIX_LEN:
        raise NameResolutionError(
            f"{text!r}: give at least {MIN_PREFIX_LEN} hex digits of the content "
            f"hash (got {len(version)})")
    return ArtifactRef(name, version)
