"""Reading the YAML files users write (rubrics, policies, signatures) with clear errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigFileError


def read_yaml(path: Path, what: str) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}: "
                              f"{exc.reason}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: not valid YAML: {exc}") from None


def reject_unknown(where: str, mapping: Mapping[str, object], allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            raise ConfigFileError(f"{where}: field '{key}': unknown; allowed: "
                                  f"{', '.join(sorted(allowed))}")


def require_text(where: str, mapping: Mapping[str, object], keys: Iterable[str]) -> None:
    for key in keys:
        value = mapping.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigFileError(f"{where}: field '{key}': required, a non-empty string")


def require_bools(where: str, mapping: Mapping[str, object], keys: Iterable[str]) -> None:
    for key in keys:
        if not isinstance(mapping.get(key, False), bool):
            raise ConfigFileError(f"{where}: field '{key}': must be true or false")
