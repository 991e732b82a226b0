"""Local certificates: a CA and one serving certificate for the controllers' webhooks and metrics; client
certificates for the real node (kubelet, kube-proxy, and the API server's client to the kubelet)."""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ensure(directory: Path, address: str = "127.0.0.1") -> Path:
    """Create ca.crt, tls.crt and tls.key in `directory` unless they exist, serving `address`. Returns ca.crt."""
    ca_path, crt_path, key_path = (directory / n for n in ("ca.crt", "tls.crt", "tls.key"))
    if ca_path.exists() and crt_path.exists() and key_path.exists():
        return ca_path
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpiplat local webhook CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address(address)), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))

    key_path.write_bytes(_key_pem(key))
    key_path.chmod(0o600)
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return ca_path


def _load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def ensure_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A CA whose key is kept (ca.crt, ca.key in `directory`), created unless it exists."""
    crt, key_path = directory / "ca.crt", directory / "ca.key"
    if crt.exists() and key_path.exists():
        return crt, key_path
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    key_path.write_bytes(_key_pem(key))
    key_path.chmod(0o600)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def issue_client(ca_crt: Path, ca_key: Path, common_name: str, groups: list[str], out: Path) -> tuple[Path, Path]:
    """A client certificate for `common_name` in `groups` (Kubernetes reads CN as the user and O as
    the groups), signed by the CA; written to out.crt and out.key unless they exist."""
    crt_path, key_path = out.with_suffix(".crt"), out.with_suffix(".key")
    if crt_path.exists() and key_path.exists():
        return crt_path, key_path
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # kwokctl's CA has a negative serial number, which cryptography warns about
        warnings.simplefilter("ignore")
        ca = x509.load_pem_x509_certificate(ca_crt.read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                         *[x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(_load_key(ca_key), hashes.SHA256()))
    key_path.write_bytes(_key_pem(key))
    key_path.chmod(0o600)
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt_path, key_path
