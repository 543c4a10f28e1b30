"""A test CA and a server certificate it signed (for `localhost`, 127.0.0.1 and ::1), made by
Debian's `openssl` in a directory the test owns: what the TLS tests (the agent's pages, the
attack suite, PostgreSQL's submit role) serve and verify against. The Rust tests make theirs the
same way (`accel_testdata::tls_files`)."""

from __future__ import annotations

import os
import pathlib
import subprocess

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def tls_files(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(CA certificate, server certificate, server key with mode 0600), PEM, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=accel test CA")
    openssl("req", *EC, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=localhost")
    (directory / "node.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "node.pem", "-days", "2", "-extfile", "node.ext")
    os.chmod(directory / "node.key", 0o600)
    return directory / "ca.pem", directory / "node.pem", directory / "node.key"
