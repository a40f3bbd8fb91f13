"""The image recipe's pins: a wheel from PyPI changes the base's tag, is used from the cache
only with its pinned hash, and a file that does not match its pin is refused, never built in."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusters import image
from clusters.image import NODE_IMAGE, PATRONI_IMAGE, ImageSpec, Wheel, fetch_wheel
from core.errors import InfraError


def _wheel(content: bytes) -> Wheel:
    return Wheel("demo==1.0", "demo-1.0-py3-none-any.whl", hashlib.sha256(content).hexdigest())


def test_a_wheel_is_part_of_the_base_recipe() -> None:
    plain = ImageSpec("x", ("python3",), NODE_IMAGE.context)
    one = ImageSpec("x", ("python3",), NODE_IMAGE.context, wheels=(_wheel(b"a"),))
    other = ImageSpec("x", ("python3",), NODE_IMAGE.context, wheels=(_wheel(b"b"),))
    assert len({plain.base_tag(), one.base_tag(), other.base_tag()}) == 3
    assert "python3-pip" in PATRONI_IMAGE.packages  # what installs the wheel in the chroot
    assert PATRONI_IMAGE.wheels[0].requirement.startswith("patroni==4.")


def test_a_cached_wheel_with_its_pinned_hash_is_not_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wheel = _wheel(b"the wheel")
    cached = tmp_path / "harness" / "wheels" / wheel.file
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"the wheel")

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("downloaded a wheel the cache holds")

    monkeypatch.setattr(image.subprocess, "run", no_download)
    assert fetch_wheel(wheel) == cached


def test_a_wheel_that_does_not_match_its_pin_is_refused_and_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed file on the index (or a corrupt cache) must stop the build, not enter it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wheel = _wheel(b"the pinned wheel")
    cached = tmp_path / "harness" / "wheels" / wheel.file

    def download(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(b"something else")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(image.subprocess, "run", download)
    with pytest.raises(InfraError, match="does not have the pinned hash"):
        fetch_wheel(wheel)
    assert not cached.exists()

    def failing(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "", "No matching distribution found")

    monkeypatch.setattr(image.subprocess, "run", failing)
    with pytest.raises(InfraError, match=r"downloading demo==1\.0 from PyPI failed: No matching"):
        fetch_wheel(wheel)
