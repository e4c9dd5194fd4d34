# SPDX-License-Identifier: BSL-1.0
# Authentication (bearer tokens with optional expiry, CA-signed client
# certificates: CN = user, O = groups; anonymous as system:anonymous) and a small
# deny list standing in for RBAC, with kube-apiserver's 401/403 answers.
import secrets
import threading
import time

from . import errors as E

# Non-resource paths the system:public-info-viewer role opens to everyone (anonymous included).
PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/")


class User:
    def __init__(self, name, groups=(), via="token"):
        self.name = name
        self.groups = list(groups)
        self.via = via

    def __repr__(self):
        return self.name


class Auth:
    def __init__(self, anonymous=True):
        self.lock = threading.Lock()
        self.tokens = {}  # token -> {"user", "groups", "expires": epoch or None}
        self.revoked_cns = set()
        self.deny = []  # (user, verb, resource, namespace) with "*" wildcards
        self.anonymous = anonymous

    def add_token(self, token=None, user="fake-user", groups=None, expires_in=None):
        token = token or secrets.token_urlsafe(24)
        with self.lock:
            self.tokens[token] = {"user": user, "groups": list(groups or []),
                                  "expires": time.time() + expires_in if expires_in is not None else None}
        return token

    def expire(self, token):
        with self.lock:
            if token in self.tokens:
                self.tokens[token]["expires"] = time.time() - 1
                return True
        return False

    def token_info(self):
        with self.lock:
            return {t: dict(v) for t, v in self.tokens.items()}

    def authenticate(self, headers, peercert):
        """A User, None for anonymous, or raise 401 as the authenticator chain does."""
        authz = headers.get("Authorization")
        if authz is not None:
            scheme, _, cred = authz.partition(" ")
            if scheme.lower() != "bearer" or not cred.strip():
                raise E.unauthorized()
            with self.lock:
                info = self.tokens.get(cred.strip())
            if info is None or (info["expires"] is not None and time.time() >= info["expires"]):
                raise E.unauthorized()
            return User(info["user"], info["groups"] + ["system:authenticated"], "token")
        if peercert:
            cn, orgs = None, []
            for rdn in peercert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            if not cn or cn in self.revoked_cns:
                raise E.unauthorized()
            return User(cn, orgs + ["system:authenticated"], "x509")
        if not self.anonymous:
            raise E.unauthorized()
        return None

    def authorize(self, user, verb, resource, subresource, namespace, name, path):
        """Raise 403 as RBAC would; everything is allowed to authenticated users unless denied."""
        uname = user.name if user else "system:anonymous"
        if user is None:
            if resource is None and path in PUBLIC_PATHS:
                return
            if resource is None:
                raise E.forbidden(uname, verb, None, None, path=path)
            raise E.forbidden(uname, verb, resource, namespace, name, subresource)
        res = resource + ("/" + subresource if subresource else "") if resource else None
        for (u, v, r, ns) in self.deny:
            if u in ("*", uname) and v in ("*", verb) and r in ("*", res, resource) and ns in ("*", namespace or ""):
                if resource is None:
                    raise E.forbidden(uname, verb, None, None, path=path)
                raise E.forbidden(uname, verb, resource, namespace, name, subresource)
