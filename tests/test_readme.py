"""The README's headline example prints exactly what the README shows."""

import re
import shlex
from pathlib import Path

from trainmem.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_headline_example_output_matches_the_readme(capsys):
    command = re.search(r"^trainmem estimate --preset llama-2-13b.*?(?=^```)", README, re.S | re.M).group(0)
    argv = shlex.split(command.replace("\\\n", " "))[1:]
    shown = re.search(r"```text\n(trainmem 0\.1\.0 · llama.*?)```", README, re.S).group(1)
    assert main(argv) == 0
    assert capsys.readouterr().out == shown
