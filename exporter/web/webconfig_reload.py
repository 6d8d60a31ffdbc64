"""The --web.config.file kept current: re-read when it or a file it names changes, as exporter-toolkit does."""

from __future__ import annotations

import os
import threading
from typing import Optional, Tuple

from exporter.base.errors import ConfigError
from exporter.base.logs import log
from exporter.web.webconfig import WebConfig, load_web_config

_TLS_FILE_KEYS = ("cert_file", "key_file", "client_ca_file")


class ReloadingWebConfig:
    """The last good web config; asked for on every request (users, headers) and every new connection
    (certificates), so cert-manager's rotation needs no restart.

    exporter-toolkit reads the file on every request and connection. We look at the files' stat
    (the config and the certificate, key and CA files it names) and read them again only when that
    changed: a Kubernetes Secret volume swaps its files by symlink, which changes the inode. A new
    file that fails its checks is logged once, with the reason, and the last good config stays.
    Turning TLS on or off needs a restart: the listening socket's scheme is fixed.
    """

    def __init__(self, path: str, first: WebConfig) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._current = first
        self._files = _files_named(path)
        self._seen = self._signature()  # what the files looked like when last read (good or bad)

    def current(self) -> WebConfig:
        signature = self._signature()
        if signature == self._seen:
            return self._current
        with self._lock:
            if signature != self._seen:  # not already re-read by a concurrent request
                self._seen = signature
                self._reload()
            return self._current

    def _reload(self) -> None:
        try:
            new = load_web_config(self.path)
            if new.tls_enabled != self._current.tls_enabled:
                raise ConfigError(f"web config {self.path}: turning TLS {'on' if new.tls_enabled else 'off'} "
                                  "needs a restart of the exporter")
        except ConfigError as exc:
            log("warn", "new web config not loaded; keeping the last good one", reason=str(exc), file=self.path)
            return
        self._current = new
        self._files = _files_named(self.path)
        self._seen = self._signature()  # the new files may name other certificate files
        log("info", "web config re-read", file=self.path, tls=new.tls_enabled, basic_auth=new.auth_required)

    def _signature(self) -> Tuple[Optional[Tuple[int, ...]], ...]:
        return tuple(_stat(name) for name in (self.path,) + self._files)


def _stat(path: str) -> Optional[Tuple[int, ...]]:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _files_named(path: str) -> Tuple[str, ...]:
    """The certificate, key and CA files a web config names (resolved as it resolves them), or none
    when it cannot be read: then only the config file itself is watched."""
    import yaml  # only needed with a web config

    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except (OSError, ValueError, yaml.YAMLError):
        return ()
    tls = doc.get("tls_server_config") if isinstance(doc, dict) else None
    if not isinstance(tls, dict):
        return ()
    base_dir = os.path.dirname(os.path.abspath(path))
    return tuple(os.path.join(base_dir, tls[key]) for key in _TLS_FILE_KEYS if isinstance(tls.get(key), str))
