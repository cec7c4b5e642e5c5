"""A model folder is untrusted input: its JSON configs are read by robfilt itself, and a folder that needs its own
Python code is refused before transformers sees it.

transformers runs a folder's ``configuration_*.py``/``modeling_*.py``/``tokenization_*.py`` when its config's
``auto_map`` names them and the caller trusts remote code; with ``trust_remote_code`` unset it asks on stdin first.
robfilt refuses such folders in one line naming the ``auto_map`` entry, and every load passes
``trust_remote_code=False`` as well, so no prompt is printed and stdin is never read. A config that is not JSON
gets one line of robfilt's own rather than a parser's long message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core.errors import RobfiltError
from ...core.textfiles import read_text


def read_config_json(folder: Path, label: str, name: str = "config.json") -> dict[str, Any]:
    """A folder's JSON config file as a dict, read by robfilt itself: one line of our own when it is not JSON."""
    path = folder / name
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise RobfiltError(
            f"{label}: {name} in {folder} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "re-save it with save_pretrained(DIR)."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RobfiltError(
            f"{label}: {name} in {folder} cannot be read ({type(exc).__name__}); check the file."
        ) from None
    if not isinstance(data, dict):
        raise RobfiltError(
            f"{label}: {name} in {folder} holds a JSON {type(data).__name__}, not an object; re-save it with "
            "save_pretrained(DIR)."
        )
    return data


def refuse_custom_code(data: dict[str, Any], folder: Path, label: str, name: str) -> None:
    """A folder that needs its own Python code (an ``auto_map`` entry) is refused: robfilt never runs a folder's
    code, so it never asks transformers to (``trust_remote_code`` is always False and stdin is never read)."""
    auto_map = data.get("auto_map")
    if not auto_map:
        return
    entries = auto_map.items() if isinstance(auto_map, dict) else [("auto_map", auto_map)]
    shown = ", ".join(f"{k}: {v if isinstance(v, str) else ' / '.join(str(x) for x in v if x)}" for k, v in entries)
    raise RobfiltError(
        f"{label}: {name} in {folder} needs the folder's own code (auto_map {shown[:200]}); robfilt never runs code "
        "from a model folder: give a model whose architecture transformers ships (GPT-2, Llama, ...)."
    )


__all__ = ["read_config_json", "refuse_custom_code"]
