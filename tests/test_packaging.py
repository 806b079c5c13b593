"""trainmem packages as a pure wheel and an sdist fit for PyPI (built offline, without isolation)."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--outdir", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    return out


def test_pure_wheel_with_the_data_and_the_console_script(dist):
    (wheel,) = dist.glob("trainmem-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for data in ("presets.json", "gpus.json", "optimizers.json", "corpus.jsonl"):
        assert f"trainmem/data/{data}" in names
    assert "trainmem/py.typed" in names
    assert "trainmem = trainmem.cli:main" in entry_points
    requirements = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [line for line in requirements if "extra ==" not in line]
    assert sorted(runtime) == ["Requires-Dist: pydantic<3,>=2.7", "Requires-Dist: pyyaml>=6"]
    assert "License-Expression: Apache-2.0" in metadata


def test_sdist_carries_the_sources_and_license(dist):
    (sdist,) = dist.glob("trainmem-*.tar.gz")
    import tarfile

    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(name.endswith("/LICENSE") for name in names)
    assert any(name.endswith("core/trainmem/simulate.py") for name in names)
