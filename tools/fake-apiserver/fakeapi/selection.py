"""Label and field selectors, parsed like k8s.io/apimachinery/pkg/labels and pkg/fields.

parse_label_selector / parse_field_selector return a predicate taking an Obj (None for an
empty selector, so callers can skip matching entirely) or raise ApiError 400.
"""

import re

from .objects import bad_request

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY_RE = re.compile(r"^(%s/)?%s$" % (_DNS_SUBDOMAIN, _NAME))
_VALUE_RE = re.compile(r"^(%s)?$" % _NAME)

# Lexer tokens, as in labels/selector.go: identifiers run until whitespace or a special char.
_SPECIAL = set("!=<>(),")
_OPS = ("!=", "==", "=", "!", "<", ">", "(", ")", ",")


def _tokens(s):
    i, n = 0, len(s)
    out = []
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
            continue
        if c in _SPECIAL:
            op = next(o for o in _OPS if s.startswith(o, i))
            out.append(("op", op))
            i += len(op)
            continue
        j = i
        while j < n and not s[j].isspace() and s[j] not in _SPECIAL:
            j += 1
        word = s[i:j]
        out.append(("kw", word) if word in ("in", "notin") else ("id", word))
        i = j
    return out


def _err(sel, why):
    return bad_request("unable to parse requirement: %s (selector %r)" % (why, sel))


def _check_key(sel, key):
    if not _KEY_RE.match(key):
        raise _err(sel, "invalid label key %r: name part must consist of alphanumeric "
                        "characters, '-', '_' or '.'" % key)


def _check_value(sel, v):
    if not _VALUE_RE.match(v):
        raise _err(sel, "invalid label value: %r" % v)


def parse_label_selector(sel):
    """-> predicate(obj) over obj.labels, or None when the selector is empty."""
    if sel is None or not sel.strip():
        return None
    toks = _tokens(sel)
    reqs = []
    i = 0

    def peek(k=0):
        return toks[i + k] if i + k < len(toks) else (None, "end of string")

    while True:
        kind, val = peek()
        if kind == "op" and val == "!":
            kind2, key = peek(1)
            if kind2 != "id":
                raise _err(sel, "missing key after '!'")
            _check_key(sel, key)
            reqs.append(("!exists", key, None))
            i += 2
        elif kind == "id":
            key = val
            _check_key(sel, key)
            i += 1
            kind, op = peek()
            if kind is None or (kind == "op" and op == ","):
                reqs.append(("exists", key, None))
            elif kind == "op" and op in ("=", "==", "!="):
                i += 1
                kind, v = peek()
                if kind == "id":
                    i += 1
                elif kind is None or (kind, v) == ("op", ","):
                    v = ""  # "key=" selects the empty value
                else:
                    raise _err(sel, "found %r, expected a value" % v)
                _check_value(sel, v)
                reqs.append(("!=" if op == "!=" else "=", key, v))
            elif kind == "op" and op in ("<", ">"):
                i += 1
                kind, v = peek()
                if kind != "id" or not re.match(r"^-?\d+$", v):
                    raise _err(sel, "for 'Gt', 'Lt' operators, the value must be an integer")
                i += 1
                reqs.append((op, key, int(v)))
            elif kind == "kw":
                i += 1
                if peek() != ("op", "("):
                    raise _err(sel, "found %r, expected: '('" % (peek()[1],))
                i += 1
                if peek() == ("op", ")"):
                    raise _err(sel, "for 'in', 'notin' operators, values set can't be empty")
                values = set()
                while True:
                    kind, v = peek()
                    if kind == "id":
                        _check_value(sel, v)
                        values.add(v)
                        i += 1
                        kind, v = peek()
                    elif kind == "op" and v in (",", ")"):
                        values.add("")  # "(a,,b)" / "()" hold an empty value, as upstream
                    else:
                        raise _err(sel, "found %r, expected a value" % (v,))
                    if kind == "op" and v == ",":
                        i += 1
                        continue
                    if kind == "op" and v == ")":
                        i += 1
                        break
                    raise _err(sel, "found %r, expected ',' or ')'" % (v,))
                reqs.append((op, key, values))
            else:
                raise _err(sel, "found %r, expected: in, notin, =, ==, !=, gt, lt" % (op,))
        else:
            raise _err(sel, "found %r, expected: !, identifier" % (val,))
        kind, val = peek()
        if kind is None:
            break
        if (kind, val) != ("op", ","):
            raise _err(sel, "found %r, expected: ','" % (val,))
        i += 1

    def match(obj):
        labels = obj.labels
        for op, key, v in reqs:
            have = labels.get(key)
            if op == "=":
                if have != v:
                    return False
            elif op == "!=":
                if have == v:
                    return False
            elif op == "exists":
                if have is None:
                    return False
            elif op == "!exists":
                if have is not None:
                    return False
            elif op == "in":
                if have is None or have not in v:
                    return False
            elif op == "notin":
                if have is not None and have in v:
                    return False
            else:  # "<" / ">": the label must be an integer
                try:
                    n = int(have)
                except (TypeError, ValueError):
                    return False
                if (op == "<" and not n < v) or (op == ">" and not n > v):
                    return False
        return True

    return match


def _split_unescaped(s, sep):
    """Split on sep, honouring backslash escapes (fields.ParseSelector)."""
    parts, cur, i = [], [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(v):
    return re.sub(r"\\(.)", r"\1", v)


def parse_field_selector(sel, rt):
    """-> predicate(obj) over obj.fields, or None when empty. Unknown field -> 400."""
    if sel is None or not sel.strip():
        return None
    reqs = []
    for term in _split_unescaped(sel, ","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^=!]+?)\s*(!=|==|=)\s*(.*)$", term)
        if not m:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (sel, term))
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3).strip())
        if field not in rt.field_labels:
            raise bad_request('field label not supported: %s' % field)
        reqs.append((field, op == "!=", value))
    if not reqs:
        return None

    def match(obj):
        f = obj.fields
        for field, negate, value in reqs:
            if (f.get(field, "") == value) == negate:
                return False
        return True

    return match


def combine(*preds):
    preds = [p for p in preds if p is not None]
    if not preds:
        return None
    if len(preds) == 1:
        return preds[0]
    return lambda o: all(p(o) for p in preds)
