"""A throwaway PKI for TLS tests, made with the openssl command: CA, server, client and rogue certs."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

OPENSSL = shutil.which("openssl")
SKIP_REASON = "needs the openssl command (apt-get install openssl)"


def make_pki(folder: Path) -> Path:
    """Writes into ``folder``: ca.{crt,key}; server.{crt,key} for 127.0.0.1/localhost; client.{crt,key}
    signed by ca; rogue.{crt,key} signed by other-ca; encrypted.key (passphrase "secret")."""
    _new_ca(folder, "ca")
    _new_ca(folder, "other-ca")
    _new_leaf(folder, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
    _new_leaf(folder, "client", "ca", "extendedKeyUsage=clientAuth")
    _new_leaf(folder, "rogue", "other-ca", "extendedKeyUsage=clientAuth")
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-aes256",
             "-pass", "pass:secret", "-out", "encrypted.key", cwd=folder)
    return folder


def _openssl(*args: str, cwd: Path) -> None:
    if OPENSSL is None:
        raise RuntimeError(SKIP_REASON)
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _new_ca(folder: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)


def _new_leaf(folder: Path, name: str, ca: str, extensions: str) -> None:
    # Key identifiers and critical basicConstraints keep Python 3.13's strict X.509 checks happy.
    (folder / f"{name}.ext").write_text(
        extensions + "\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=folder)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=folder)
