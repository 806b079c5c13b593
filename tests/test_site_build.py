"""build_site.py's pure-Python wheel of an sdist (PyYAML for the page) and its service-worker version."""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build_site  # noqa: E402


def _sdist(path: Path) -> Path:
    members = {
        "pyyaml-6.0.3/lib/yaml/__init__.py": b"__version__ = '6.0.3'\nfrom .nodes import Node\n",
        "pyyaml-6.0.3/lib/yaml/nodes.py": b"class Node: pass\n",
        "pyyaml-6.0.3/yaml/_yaml.pyx": b"# the C extension: left out\n",
        "pyyaml-6.0.3/LICENSE": b"MIT\n",
        "pyyaml-6.0.3/setup.py": b"",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_wheel_from_sdist_has_the_pure_package_and_a_true_record(tmp_path):
    wheel = build_site.wheel_from_sdist(_sdist(tmp_path / "pyyaml-6.0.3.tar.gz"), "pyyaml", "6.0.3", tmp_path)
    assert wheel.name == "pyyaml-6.0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert names == {"yaml/__init__.py", "yaml/nodes.py", "PyYAML-6.0.3.dist-info/LICENSE",
                         "PyYAML-6.0.3.dist-info/METADATA", "PyYAML-6.0.3.dist-info/WHEEL",
                         "PyYAML-6.0.3.dist-info/RECORD"}
        assert b"Tag: py3-none-any" in archive.read("PyYAML-6.0.3.dist-info/WHEEL")
        for line in archive.read("PyYAML-6.0.3.dist-info/RECORD").decode().splitlines():
            path, digest, size = line.split(",")
            if path.endswith("RECORD"):
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
    first = wheel.read_bytes()
    again = build_site.wheel_from_sdist(tmp_path / "pyyaml-6.0.3.tar.gz", "pyyaml", "6.0.3", tmp_path)
    assert again.read_bytes() == first  # reproducible


def test_the_sdist_pins_are_hash_pinned():
    pins = build_site.pinned_sdists()
    assert [name for name, *_ in pins] == ["pyyaml"]
    assert all(len(digest) == 64 for *_, digest in pins)


def test_service_worker_version_follows_the_files(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    first = build_site.stamp_service_worker(tmp_path)
    assert first in (tmp_path / "sw.js").read_text()
    assert build_site.stamp_service_worker(tmp_path) == first
    (tmp_path / "a.txt").write_text("two")
    assert build_site.stamp_service_worker(tmp_path) != first
