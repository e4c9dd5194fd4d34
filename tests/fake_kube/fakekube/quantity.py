# SPDX-License-Identifier: BSL-1.0
# resource.Quantity parsing ("500m", "1.5", "128Mi", "1e3") to exact Fractions,
# and the canonical forms the API server and kubelet print back.
import re
from fractions import Fraction

from .errors import bad_request

_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
        "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse(q):
    """A Quantity string (or number) -> Fraction; raises 400 as the decoder does for a malformed one."""
    if isinstance(q, (int, float)):
        return Fraction(q).limit_denominator(10**9)
    s = str(q).strip()
    m = _RE.match(s)
    if not m:
        raise bad_request("quantities must match the regular expression "
                          "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num, suf = m.group(1), m.group(2)
    try:
        n = Fraction(num)
    except ValueError:
        raise bad_request("unable to parse quantity's suffix")
    if suf in _BIN:
        return n * _BIN[suf]
    if suf in _DEC:
        return n * _DEC[suf]
    if suf[:1] in ("e", "E"):
        try:
            return n * Fraction(10) ** int(suf[1:])
        except ValueError:
            pass
    raise bad_request("unable to parse quantity's suffix")


def fmt_cpu(f):
    if f.denominator == 1:
        return str(f.numerator)
    return f"{int(f * 1000)}m"


def fmt_bytes(f):
    n = int(f)
    for suf in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if n and n % _BIN[suf] == 0:
            return f"{n // _BIN[suf]}{suf}"
    return str(n)
