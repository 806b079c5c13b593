"""A launch script's Hydra overrides (``python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo ...``) as one mapping.

verl's example scripts (``examples/grpo_trainer/run_*.sh``) pass the whole run as dotted
``key=value`` overrides on the command line. This reads every ``a.b.c=value`` token of the text
(line continuations joined; ``+key=`` adds, ``++key=`` forces: both set; ``~key`` deletions are
skipped) into the nested mapping the YAML would hold. Values are read as Hydra reads plain
ones: ``true``/``false``, ``null``, numbers, ``[a,b]`` lists, quoted or bare text. A shell variable
set in the script by a plain assignment (``ENGINE=${1:-vllm}``, ``export GPUS=8``) is replaced
by its value or default; any other ``$VAR`` stays as text, and the reader counts it as absent.
"""

from __future__ import annotations

import re
from typing import Any

_OVERRIDE = re.compile(r"(?:^|(?<=\s))\+{0,2}([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)=(\"[^\"]*\"|'[^']*'|\S*)")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|[^\s#]*)\s*(?:#.*)?$", re.MULTILINE)
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")
MAX_OVERRIDES = 2000
MAX_DEPTH = 12


def looks_like_overrides(text: str) -> bool:
    """At least two dotted ``key=value`` tokens: a launch script or a file of overrides."""
    return len(_OVERRIDE.findall(text.replace("\\\n", " "), 0)) >= 2


def parse_overrides(text: str, name: str) -> dict[str, Any]:
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if not line.lstrip().startswith("#")]
    body = "\n".join(lines)
    variables = {m.group(1): _unquote(m.group(2)) for m in _ASSIGNMENT.finditer(body)}
    found = _OVERRIDE.findall(body)
    if not found:
        raise ValueError(f"{name}: no key=value overrides found (expected lines like actor_rollout_ref.model.path=...)")
    if len(found) > MAX_OVERRIDES:
        raise ValueError(f"{name}: more than {MAX_OVERRIDES} overrides")
    result: dict[str, Any] = {}
    for key, raw in found:
        parts = key.split(".")
        if len(parts) > MAX_DEPTH:
            raise ValueError(f"{name}: {key}: nested deeper than {MAX_DEPTH} levels")
        node = result
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = _value(_substitute(_unquote(raw), variables))
    return result


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _substitute(text: str, variables: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables and "$" not in variables[name]:
            return variables[name]
        if name in variables:
            inner = _VARIABLE.fullmatch(variables[name])
            if inner and inner.group(2) is not None:
                return inner.group(2)  # NAME=${1:-default}
        if match.group(2) is not None:
            return match.group(2)
        return match.group(0)

    return _VARIABLE.sub(replace, text)


def _value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~", ""):
        return None
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if number == number and number not in (float("inf"), float("-inf")) else text
    if text.startswith("[") and text.endswith("]"):
        return [_value(_unquote(item.strip())) for item in text[1:-1].split(",") if item.strip()]
    return text
