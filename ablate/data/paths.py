"""Where the data paths a spec names point, and the one error type of bad or missing data.

A relative data path follows the working directory, as fairseq's paths do, unless its section sets ``root``
(itself relative to the working directory when relative); ``${VAR}`` and ``${VAR:-default}`` are expanded.
Every resolved path keeps, in words, what it was resolved against, so that an error about it can say.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.errors import AblateError


class DataError(AblateError):
    """Bad or missing data: the message is one line naming the file (and line) at fault."""


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str, where: str = "path") -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` (shell syntax) and a leading ``~``."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise DataError(f"{where}: environment variable {name} is not set (in {value!r}); "
                        f"set it or write ${{{name}:-default}}")

    return os.path.expanduser(_ENV.sub(substitute, value))


@dataclass(frozen=True)
class DataRoot:
    """The folder relative data paths start from, and in words where it came from (for messages): a
    relative path follows the working directory, as fairseq's do, unless the section sets ``root``."""

    folder: Path  # absolute
    origin: str  # "the working directory /w", "data.files.root '${DIR:-d}' (DIR unset)"


def data_root(root: str | None, where: str) -> DataRoot:
    """``root`` (``${VAR}`` expanded) made absolute against the working directory; no root: the latter."""
    cwd = Path.cwd()
    if not root:
        return DataRoot(cwd, f"the working directory {cwd}")
    expanded = expand_env(root, where)
    variables = [m.group(1) for m in _ENV.finditer(root)]
    said = ", ".join(f"{v}={os.environ[v]}" if os.environ.get(v) else f"{v} unset" for v in variables)
    origin = f"{where} {root!r}" + (f" ({said})" if said else "")
    if not Path(expanded).is_absolute():
        origin += f" under the working directory {cwd}"
    return DataRoot(Path(os.path.abspath(cwd / expanded)), origin)


@dataclass(frozen=True)
class DataPath:
    """One path a spec names: its field, the absolute path, and how a relative one was resolved."""

    field: str  # "data.files.train.src"
    path: Path  # absolute
    resolved_from: str  # "" when written absolute, else DataRoot.origin

    def explain(self) -> str:
        return f" (resolved against {self.resolved_from})" if self.resolved_from else ""


def data_path(raw: str, root: DataRoot, field_name: str) -> DataPath:
    expanded = Path(expand_env(raw, field_name))
    if expanded.is_absolute():
        return DataPath(field_name, Path(os.path.abspath(expanded)), "")
    return DataPath(field_name, Path(os.path.abspath(root.folder / expanded)), root.origin)


def with_absolute_roots(data: Any) -> Any:
    """A data section (``DataSpec``) whose ``files``/``text`` root is the absolute folder it resolves to
    here (``${VAR}`` expanded, the working directory applied), so that a spec written for later use (a
    search's best.yaml) reads the same files from any folder. Other sources are returned as they are."""
    update = {}
    for name in ("files", "text"):
        section = getattr(data, name, None)
        if getattr(data, "source", None) == name and section is not None:
            root = data_root(section.root, f"data.{name}.root").folder
            update[name] = section.model_copy(update={"root": str(root)})
    return data.model_copy(update=update) if update else data
