# SPDX-License-Identifier: BSL-1.0
# A self-signed CA, a server certificate for 127.0.0.1/localhost and client
# certificates (CN = user, O = groups), made with the openssl CLI (EC P-256, fast)
# and kept in the state directory so a restart reuses them.
import os
import ssl
import subprocess
import tempfile
import time

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _run(args, **kw):
    r = subprocess.run(["openssl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout


def _decode(path):
    try:
        return ssl._ssl._test_decode_cert(path)  # CPython's PEM decoder: no subprocess, fast start
    except (OSError, ValueError, ssl.SSLError):
        return None


def _valid(cert, ca=None, seconds=3600):
    """The cert exists, is not expiring within `seconds`, and (if ca) was issued by ca, after it."""
    info = _decode(cert) if os.path.exists(cert) else None
    if info is None:
        return False
    if ssl.cert_time_to_seconds(info["notAfter"]) < time.time() + seconds:
        return False
    if ca:
        ca_info = _decode(ca)
        if ca_info is None or info.get("issuer") != ca_info.get("subject"):
            return False
        if os.path.getmtime(cert) < os.path.getmtime(ca):
            return False
    return True


def ensure_ca(d):
    ca_crt, ca_key = os.path.join(d, "ca.crt"), os.path.join(d, "ca.key")
    if _valid(ca_crt) and os.path.exists(ca_key):
        return ca_crt, ca_key
    _run(["req", "-x509", *_EC, "-keyout", ca_key, "-out", ca_crt, "-days", "3650",
          "-subj", "/CN=fake-kube-ca",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"])
    os.chmod(ca_key, 0o600)
    return ca_crt, ca_key


def issue(d, ca_crt, ca_key, stem, subject, *, server=False, days=365, force=False):
    """Issue <stem>.crt/<stem>.key signed by the CA (reused when still valid)."""
    crt, key = os.path.join(d, stem + ".crt"), os.path.join(d, stem + ".key")
    if not force and _valid(crt, ca_crt) and os.path.exists(key):
        return crt, key
    csr = _run(["req", "-new", *_EC, "-keyout", key, "-subj", subject])
    if server:
        ext = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,"
               "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n")
    else:
        ext = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=clientAuth\n")
    with tempfile.NamedTemporaryFile("w", suffix=".ext", dir=d, delete=False) as f:
        f.write(ext)
        extfile = f.name
    try:
        # -days 0 would not be an expired cert; negative validity is made with -not_after elsewhere.
        _run(["x509", "-req", "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
              str(int.from_bytes(os.urandom(8), "big")), "-days", str(days), "-extfile", extfile,
              "-out", crt], input=csr)
    finally:
        os.unlink(extfile)
    os.chmod(key, 0o600)
    return crt, key


def subject_for(user, groups=()):
    return "/" + "/".join([f"O={g}" for g in groups] + [f"CN={user}"])
