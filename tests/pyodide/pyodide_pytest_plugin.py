"""pytest plugin for running the core's tests inside Pyodide (loaded by run_in_pyodide.mjs).

Pyodide has no subprocesses and no PyTorch: a test that starts a process is skipped, and a
test module that cannot import a package Pyodide does not ship (torch, transformers, ...) is
skipped instead of failing collection. Any other failure is a real failure under WebAssembly.
"""

from __future__ import annotations

import subprocess

import pytest

NOT_IN_PYODIDE = ("torch", "transformers", "peft", "accelerate", "numpy", "playwright")


def _no_subprocess(*args, **kwargs):
    pytest.skip("starts a subprocess, which Pyodide cannot")


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen.__init__ = _no_subprocess  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if report.failed:
        text = str(report.longrepr)
        missing = [name for name in NOT_IN_PYODIDE if f"No module named '{name}" in text]
        if missing:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, f"Skipped: needs {missing[0]}, which Pyodide does not ship")
    return report


HOST_ONLY = ("dev-zero", "test_fuzz_setups.py::")
"""Tests that need the host operating system: a /dev/zero character device (Pyodide's file system
has none), and the fuzz's CPU-time limits (signals and resource limits, which WebAssembly lacks)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs the host operating system (devices, signals), which Pyodide does not have")
    for item in items:
        if any(marker in item.nodeid for marker in HOST_ONLY):
            item.add_marker(skip)
