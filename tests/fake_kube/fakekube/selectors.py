# SPDX-License-Identifier: BSL-1.0
# Label selectors (k8s.io/apimachinery/pkg/labels: =, ==, !=, in, notin, exists,
# !exists, >, <) and field selectors (=, ==, != over each kind's supported fields).
import re

from .errors import bad_request

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_error(key):
    """None if `key` is a valid qualified name (optional DNS prefix + '/' + name), else the reason."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUB.match(prefix)):
        return ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character")
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def label_value_error(value):
    if value == "":
        return None
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                "'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return None


_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),><]+)")


def _tokens(text):
    pos, out = 0, []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise bad_request(f"unable to parse requirement: found unexpected character at {pos}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class LabelSelector:
    """A parsed label selector: a list of (key, op, values) requirements, ANDed."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = self._parse(self.text)

    @staticmethod
    def _parse(text):
        toks = _tokens(text)
        reqs, i = [], 0

        def fail(msg):
            raise bad_request(f"unable to parse requirement: {msg}")

        def check_key(k):
            err = label_key_error(k)
            if err:
                fail(f'<nil>: Invalid value: "{k}": {err}')

        def check_value(v):
            err = label_value_error(v)
            if err:
                fail(f'values[0]: Invalid value: "{v}": {err}')

        while i < len(toks):
            t = toks[i]
            if t == "!":
                if i + 1 >= len(toks):
                    fail("found '', expected: identifier")
                k = toks[i + 1]
                check_key(k)
                reqs.append((k, "!", ()))
                i += 2
            elif t in (",", "(", ")", "=", "==", "!=", ">", "<"):
                fail(f"found '{t}', expected: !, identifier, or 'end of string'")
            else:
                k = t
                check_key(k)
                i += 1
                if i >= len(toks) or toks[i] == ",":
                    reqs.append((k, "exists", ()))
                else:
                    op = toks[i]
                    i += 1
                    if op in ("=", "==", "!="):
                        v = ""
                        if i < len(toks) and toks[i] != ",":
                            v = toks[i]
                            i += 1
                        check_value(v)
                        reqs.append((k, "!=" if op == "!=" else "=", (v,)))
                    elif op in ("in", "notin"):
                        if i >= len(toks) or toks[i] != "(":
                            fail(f"found '{toks[i] if i < len(toks) else ''}', expected: '('")
                        i += 1
                        vals = []
                        expect_value = True
                        while i < len(toks) and toks[i] != ")":
                            if toks[i] == ",":
                                if expect_value:
                                    vals.append("")
                                expect_value = True
                            else:
                                check_value(toks[i])
                                vals.append(toks[i])
                                expect_value = False
                            i += 1
                        if i >= len(toks):
                            fail("found '', expected: ')'")
                        i += 1
                        if not vals:
                            fail("for 'in', 'notin' operators, values set can't be empty")
                        reqs.append((k, op, tuple(vals)))
                    elif op in (">", "<"):
                        if i >= len(toks):
                            fail("found '', expected: integer")
                        try:
                            n = int(toks[i])
                        except ValueError:
                            fail("for 'Gt', 'Lt' operators, the value must be an integer")
                        i += 1
                        reqs.append((k, op, (n,)))
                    else:
                        fail(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")
            if i < len(toks):
                if toks[i] != ",":
                    fail(f"found '{toks[i]}', expected: ',' or 'end of string'")
                i += 1
                if i >= len(toks):
                    fail("found '', expected: identifier after ','")
        return reqs

    def empty(self):
        return not self.reqs

    def matches(self, labels):
        labels = labels or {}
        for k, op, vals in self.reqs:
            has = k in labels
            v = labels.get(k)
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
            if op == "=" and (not has or v != vals[0]):
                return False
            if op == "!=" and has and v == vals[0]:
                return False
            if op == "in" and (not has or v not in vals):
                return False
            if op == "notin" and has and v in vals:
                return False
            if op in (">", "<"):
                try:
                    n = int(v) if has else None
                except ValueError:
                    return False
                if n is None or (op == ">" and not n > vals[0]) or (op == "<" and not n < vals[0]):
                    return False
        return True


def _get(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# The fields each kind's registry strategy exposes to field selectors (GetAttrs / ToSelectableFields).
FIELDS = {
    "pods": ["metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
             "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
             "status.podIP", "status.nominatedNodeName"],
    "secrets": ["metadata.name", "metadata.namespace", "type"],
    "namespaces": ["metadata.name", "status.phase"],
    "nodes": ["metadata.name", "spec.unschedulable"],
    "events": ["metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
               "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
               "reportingComponent", "source", "type"],
}


def field_value(resource, obj, field):
    if field == "source" and resource == "events":
        return _str(_get(obj, "source.component") or obj.get("reportingComponent"))
    if field == "spec.hostNetwork":
        return _str(bool(_get(obj, field)))
    if field == "spec.unschedulable":
        return _str(bool(_get(obj, field)))
    return _str(_get(obj, field))


class FieldSelector:
    def __init__(self, resource, text):
        self.text = text or ""
        self.reqs = []
        if not self.text:
            return
        for term in _split_unescaped(self.text, ","):
            m = re.match(r"^(.*?)(==|!=|=)(.*)$", term)
            if not m or not m.group(1):
                raise bad_request(f"invalid selector: '{self.text}'; can't understand '{term}'")
            field, op, value = m.group(1), m.group(2), _unescape(m.group(3))
            if field not in FIELDS.get(resource, ["metadata.name", "metadata.namespace"]):
                raise bad_request(f'field label not supported: {field}')
            self.reqs.append((field, "!=" if op == "!=" else "=", value))
        self.resource = resource

    def empty(self):
        return not self.reqs

    def matches(self, obj):
        for field, op, value in self.reqs:
            v = field_value(self.resource, obj, field)
            if (op == "=") != (v == value):
                return False
        return True

    def name(self):
        """The name an equality on metadata.name pins, or None."""
        for field, op, value in self.reqs:
            if field == "metadata.name" and op == "=":
                return value
        return None


def _split_unescaped(text, sep):
    parts, cur, esc = [], "", False
    for ch in text:
        if esc:
            cur += "\\" + ch
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == sep:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _unescape(v):
    return re.sub(r"\\(.)", r"\1", v)
