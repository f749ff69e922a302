"""Kubernetes label selectors, parsed and matched locally.

Its own module because both the config (validating selectors at load time) and the
node-capacity watcher (matching nodes) need it, and neither should import the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        v = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and v in self.values
        return not has or v not in self.values  # "!=" / "notin": absent key matches


_REQ_RE = re.compile(
    r"""\s*(?:
        (?P<not>!)\s*(?P<nkey>[^\s,=!()]+)
      | (?P<skey>[^\s,=!()]+)\s+(?P<setop>in|notin)\s*\((?P<vals>[^()]*)\)
      | (?P<key>[^\s,=!()]+)\s*(?P<op>==|=|!=)\s*(?P<val>[^\s,=!()]*)
      | (?P<ekey>[^\s,=!()]+)
    )\s*(?:,|$)""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes equality/set-based label selector ("a=b,c!=d,e in (f,g),!h,i")."""

    text: str
    requirements: tuple[_Requirement, ...]

    @staticmethod
    def parse(text: str) -> LabelSelector:
        reqs: list[_Requirement] = []
        pos = 0
        s = text.strip()
        while pos < len(s):
            m = _REQ_RE.match(s, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"invalid label selector {text!r} at {s[pos:]!r}")
            if m["nkey"]:
                reqs.append(_Requirement(m["nkey"], "!", frozenset()))
            elif m["skey"]:
                vals = frozenset(v.strip() for v in m["vals"].split(",") if v.strip())
                reqs.append(_Requirement(m["skey"], m["setop"], vals))
            elif m["key"]:
                op = "=" if m["op"] in ("=", "==") else "!="
                reqs.append(_Requirement(m["key"], op, frozenset({m["val"]})))
            else:
                reqs.append(_Requirement(m["ekey"], "exists", frozenset()))
            pos = m.end()
            if s[pos - 1 : pos] == "," and pos == len(s):
                raise ValueError(f"invalid label selector {text!r}: trailing comma")
        return LabelSelector(text, tuple(reqs))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        lab = labels or {}
        return all(r.matches(lab) for r in self.requirements)
