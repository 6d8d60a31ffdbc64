"""The kubeconfig `top` reads: `$KUBECONFIG`'s files merged as kubectl merges them (pure but for reading files).

kubectl's rules (client-go's clientcmd loading rules): files that do not exist are skipped; for each named
entry (a cluster, a user, a context) the first file that defines the name wins; `current-context` comes
from the first file that sets it. A relative path in a file (a CA, a client certificate, a token file) is
relative to that file's folder, so it is made absolute while the files are merged.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

# The entries of each named list whose values are file paths (client-go's ResolvePaths).
_PATH_FIELDS = {"clusters": ("cluster", ("certificate-authority",)),
                "users": ("user", ("client-certificate", "client-key", "tokenFile")),
                "contexts": ("context", ())}


class KubeconfigError(ValueError):
    """A kubeconfig file that exists but cannot be read as one."""


def kubeconfig_files(environ: Mapping[str, str]) -> Tuple[str, ...]:
    """$KUBECONFIG's files in order (each once), else ~/.kube/config where it exists, else none."""
    listed = [path for path in environ.get("KUBECONFIG", "").split(os.pathsep) if path]
    if listed:
        return tuple(dict.fromkeys(listed))
    home = os.path.join(os.path.expanduser("~"), ".kube", "config")
    return (home,) if os.path.exists(home) else ()


def merged_kubeconfig(paths: Sequence[str]) -> Dict:
    """One kubeconfig from `paths`, as kubectl sees them; KubeconfigError naming a file it cannot read."""
    merged: Dict = {"clusters": [], "users": [], "contexts": []}
    current: Optional[str] = None
    for path in paths:
        loaded = _load(path)
        if loaded is None:
            continue
        current = current or loaded.get("current-context") or None
        for section in _PATH_FIELDS:
            names = {entry.get("name") for entry in merged[section]}
            merged[section] += [_absolute(section, entry, path) for entry in loaded.get(section) or []
                                if isinstance(entry, dict) and entry.get("name") not in names]
    if current:
        merged["current-context"] = current
    return merged


def _load(path: str) -> Optional[Dict]:
    import yaml  # only where a kubeconfig is read: the Prometheus path never needs it

    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except FileNotFoundError:
        return None  # as kubectl: a file of the list that is not there is no error
    except (OSError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {_one_line(exc)}") from None
    if loaded is None:
        return None
    if not isinstance(loaded, dict):
        raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig (a YAML mapping)")
    return loaded


def _absolute(section: str, entry: Dict, path: str) -> Dict:
    inner, fields = _PATH_FIELDS[section]
    body = entry.get(inner)
    if not isinstance(body, dict) or not any(body.get(name) for name in fields):
        return entry
    folder = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    resolved = {name: os.path.join(folder, value) if name in fields and isinstance(value, str) and value
                and not os.path.isabs(value) else value for name, value in body.items()}
    return dict(entry, **{inner: resolved})


def context_names(config: Dict) -> List[str]:
    return [entry["name"] for entry in config.get("contexts") or [] if isinstance(entry.get("name"), str)]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]
