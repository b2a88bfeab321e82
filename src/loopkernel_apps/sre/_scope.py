"""Scope: the namespaces other than the run's that a question names.

The run declines each (a refused request, "Declined: …" at the top of the report), whatever
the wording: "namespace X", "the X namespace", "-n X", "X/pod/NAME", a Service DNS name
``NAME.X.svc``, or a system namespace (``kube-system``, ``ingress-nginx`` …) named anywhere.
"""

from __future__ import annotations

import re

__all__ = ["other_namespaces"]

_NS_NAME = r"['\"`]?([a-z0-9][a-z0-9-]{0,62})['\"`]?"
_OTHER_NS = [
    re.compile(rf"(?i)\b(?:namespaces?|ns)[\s:=]+{_NS_NAME}"),
    re.compile(
        rf"(?i)\b(?:in|from|of|on|under|across)\s+(?:the\s+)?{_NS_NAME}\s+(?:namespace|ns)\b"
    ),
    re.compile(rf"(?:^|\s)(?:-n|--namespace)[\s=]+{_NS_NAME}"),
    re.compile(r"(?i)\b([a-z0-9][a-z0-9-]{0,62})/(?:pods?|deploy(?:ments?)?|svc|services?)/"),
    re.compile(r"(?i)\b[a-z0-9-]+\.([a-z0-9][a-z0-9-]{0,62})\.svc\b"),
    re.compile(
        r"\b(kube-system|kube-public|kube-node-lease|monitoring|istio-system|ingress-nginx"
        r"|cert-manager|argocd|flux-system|gatekeeper-system|calico-system|tigera-operator)\b"
    ),
]
"""How a question names another namespace: "namespace X", "the X namespace", "-n X",
"X/pod/NAME", a Service's DNS name NAME.X.svc, or a system namespace named anywhere."""
_NOT_NS = set(
    """
    the a an this that these those our my your their same other another every all any is are
    was were be been has have had shows show looks look seems seem and or but which where
    when who what why how to for with without in on of it its as at by from if not no so too
    also only just scope
    """.split()  # noqa: SIM905 (a word list reads best as words)
)
"""Words that follow "namespace" in a sentence without being a namespace's name."""


def other_namespaces(question: str, namespace: str) -> list[str]:
    """The namespaces other than ``namespace`` the question names, in order of mention."""
    found: list[tuple[int, str]] = []
    # "the billing namespace slow": the word after "namespace" is not a name when the one
    # before it already was
    named_before = {m.end() for m in _OTHER_NS[1].finditer(question)}
    for pattern in _OTHER_NS:
        for m in pattern.finditer(question):
            name = m.group(1).lower()
            if pattern is _OTHER_NS[0] and any(m.start() < e <= m.end() for e in named_before):
                continue
            if name != namespace and name not in _NOT_NS:
                found.append((m.start(1), name))
    return list(dict.fromkeys(n for _, n in sorted(found)))
