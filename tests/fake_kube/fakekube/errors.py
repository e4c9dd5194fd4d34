# SPDX-License-Identifier: BSL-1.0
# Kubernetes `Status` objects and the ApiError exception that carries one, with
# the reasons, codes and messages kube-apiserver uses (k8s.io/apimachinery/pkg/api/errors).


class ApiError(Exception):
    """An error answered as a metav1.Status body with `code` as the HTTP status."""

    def __init__(self, code, reason, message, details=None, retry_after=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self):
        return status_failure(self.code, self.reason, self.message, self.details)


def status_failure(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason}
    if details is not None:
        s["details"] = details
    s["code"] = code
    return s


def status_success(name, kind, uid=None):
    d = {"name": name, "kind": kind}
    if uid:
        d["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}


def not_found(resource, name):
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def already_exists(resource, name):
    return ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', {"name": name, "kind": resource})


def conflict(resource, name, why="the object has been modified; please apply your changes to the latest version and try again"):
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {why}',
                    {"name": name, "kind": resource})


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(user, verb, resource, namespace, name=None, subresource=None, path=None):
    """The RBAC denial message (k8s.io/apiserver/pkg/endpoints/handlers/responsewriters.ForbiddenStatusError)."""
    if path is not None:
        return ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot {verb} path "{path}"', {})
    res = resource + (f"/{subresource}" if subresource else "")
    what = f'{res} "{name}"' if name else res
    msg = f'{what} is forbidden: User "{user}" cannot {verb} resource "{res}" in API group ""'
    msg += f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    details = {"kind": resource}
    if name:
        details = {"name": name, "kind": resource}
    return ApiError(403, "Forbidden", msg, details)


def expired(message):
    return ApiError(410, "Expired", message)


def method_not_allowed(message="the server does not allow this method on the requested resource"):
    return ApiError(405, "MethodNotAllowed", message, {})


def invalid(kind, name, causes):
    """422 Invalid; causes = [(reason, field, message)] as field.ErrorList.ToAggregate prints them."""
    parts = [f"{f}: {m}" for (_, f, m) in causes]
    body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name, "kind": kind,
               "causes": [{"reason": r, "message": m, "field": f} for (r, f, m) in causes]}
    if not name:
        del details["name"]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {body}', details)


# field.Error constructors: (reason, field, message)
def required(field, detail=""):
    return ("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def invalid_value(field, value, detail):
    import json
    return ("FieldValueInvalid", field, f"Invalid value: {json.dumps(value)}: {detail}")


def not_supported(field, value, supported):
    import json
    opts = ", ".join(json.dumps(s) for s in supported)
    return ("FieldValueNotSupported", field, f"Unsupported value: {json.dumps(value)}: supported values: {opts}")


def duplicate(field, value):
    import json
    return ("FieldValueDuplicate", field, f"Duplicate value: {json.dumps(value)}")


def forbidden_field(field, detail):
    return ("FieldValueForbidden", field, f"Forbidden: {detail}")


def too_long(field, limit):
    return ("FieldValueTooLong", field, f"Too long: may not be more than {limit} bytes")
