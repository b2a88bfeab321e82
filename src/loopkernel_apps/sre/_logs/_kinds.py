"""An error's kind, from structured fields first, then from the words of its line.

The knowledge is data: ``ERRNO_KINDS`` (errno and error-code names, SQLSTATEs),
``EXCEPTION_KINDS`` (exception classes, by full name then by last name), ``status_kind``
(HTTP statuses), and ``TEXT_KINDS``, an ordered table of text signals where the first row
that matches wins. Authentication rows come first: a refused password names the host and
port it was refused at, and is never a connection or upstream failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loopkernel_apps.sre._logs._records import ErrorKind

__all__ = [
    "CREDENTIAL_KINDS",
    "ERRNO_KINDS",
    "EXCEPTION_KINDS",
    "TEXT_KINDS",
    "Kinded",
    "exception_kind",
    "status_kind",
    "text_kind",
]

K = ErrorKind


@dataclass(frozen=True, kw_only=True, slots=True)
class Kinded:
    """A kind and what decided it."""

    kind: ErrorKind
    signal: str


ERRNO_KINDS: dict[str, ErrorKind] = {
    **dict.fromkeys(("ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "EPIPE",
                     "ECONNABORTED", "UND_ERR_SOCKET"), K.CONNECTION_REFUSED),
    **dict.fromkeys(("ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "EAI_FAIL", "NXDOMAIN"), K.DNS),
    **dict.fromkeys(("ETIMEDOUT", "ESOCKETTIMEDOUT", "UND_ERR_CONNECT_TIMEOUT",
                     "UND_ERR_HEADERS_TIMEOUT", "DEADLINE_EXCEEDED"), K.TIMEOUT),
    **dict.fromkeys(("EACCES", "EPERM", "EROFS"), K.PERMISSION),
    **dict.fromkeys(("ENOMEM",), K.OUT_OF_MEMORY),
    **dict.fromkeys(("CERT_HAS_EXPIRED", "DEPTH_ZERO_SELF_SIGNED_CERT",
                     "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "SELF_SIGNED_CERT_IN_CHAIN",
                     "ERR_TLS_CERT_ALTNAME_INVALID", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY"),
                    K.TLS),
    **dict.fromkeys(("28P01", "28000", "ER_ACCESS_DENIED_ERROR", "UNAUTHENTICATED", "NOAUTH",
                     "WRONGPASS"), K.AUTHENTICATION),
    **dict.fromkeys(("42501", "PERMISSION_DENIED", "ER_DBACCESS_DENIED_ERROR",
                     "ER_TABLEACCESS_DENIED_ERROR"), K.AUTHORIZATION),
    **dict.fromkeys(("53200",), K.OUT_OF_MEMORY),
    **dict.fromkeys(("UNAVAILABLE",), K.UPSTREAM_5XX),
}
"""Error codes as the runtimes and clients put them in a field: errno names (Node's
``code``), Postgres SQLSTATEs (28P01 invalid password, 42501 insufficient privilege, 53200
out of memory), MySQL and Redis names, gRPC status names."""

EXCEPTION_KINDS: dict[str, ErrorKind] = {
    # full names first: the same last name means different things in different packages
    "System.Security.Authentication.AuthenticationException": K.TLS,
    "java.nio.file.AccessDeniedException": K.PERMISSION,
    "System.UnauthorizedAccessException": K.PERMISSION,
    # last names
    **dict.fromkeys(("ConnectionRefusedError", "ConnectException", "ConnectionResetError",
                     "NoRouteToHostException", "ConnectionError", "HttpHostConnectException",
                     "CommunicationsException", "RedisConnectionException",
                     "BrokenPipeError"), K.CONNECTION_REFUSED),
    **dict.fromkeys(("UnknownHostException", "gaierror", "NameResolutionError",
                     "UnresolvedAddressException"), K.DNS),
    **dict.fromkeys(("TimeoutError", "SocketTimeoutException", "TimeoutException",
                     "ReadTimeout", "ConnectTimeout", "ReadTimeoutError", "ConnectTimeoutError",
                     "ReadTimeoutException", "ConnectTimeoutException", "DeadlineExceeded",
                     "TaskCanceledException", "HttpRequestTimeoutException",
                     "QueryCanceledError"), K.TIMEOUT),
    **dict.fromkeys(("SSLError", "SSLHandshakeException", "SSLCertVerificationError",
                     "CertificateExpiredException", "CertPathValidatorException",
                     "SSLPeerUnverifiedException", "CertificateException"), K.TLS),
    **dict.fromkeys(("AuthenticationException", "AuthenticationError", "InvalidPasswordError",
                     "AuthenticationFailedException", "BadCredentialsException",
                     "InvalidAuthorizationSpecification", "NotAuthorizedException",
                     "UnauthorizedException", "InvalidCredentialsException",
                     "SaslAuthenticationException", "MongoSecurityException"),
                    K.AUTHENTICATION),
    **dict.fromkeys(("AccessDeniedException", "ForbiddenException", "ForbiddenError",
                     "InsufficientPrivilege", "InsufficientPrivilegeError",
                     "AuthorizationException", "AccessDeniedError"), K.AUTHORIZATION),
    **dict.fromkeys(("PermissionError", "UnauthorizedAccessException"), K.PERMISSION),
    **dict.fromkeys(("MemoryError", "OutOfMemoryError", "OutOfMemoryException",
                     "InsufficientExecutionStackException"), K.OUT_OF_MEMORY),
    **dict.fromkeys(("ImproperlyConfigured", "MissingEnvironmentVariable",
                     "OptionsValidationException", "ConfigurationErrorsException",
                     "MissingRequiredPropertiesException", "UndefinedEnvironmentVariable",
                     "EnvError", "FileNotFoundError", "FileNotFoundException",
                     "NoSuchFileException"), K.MISSING_CONFIG),
    **dict.fromkeys(("ModuleNotFoundError", "ImportError", "ClassNotFoundException",
                     "NoClassDefFoundError", "DllNotFoundException", "TypeLoadException",
                     "UnsatisfiedLinkError"), K.MISSING_DEPENDENCY),
    **dict.fromkeys(("YAMLError", "ScannerError", "ParserError", "JSONDecodeError",
                     "JsonParseException", "TomlDecodeError", "InvalidConfigException",
                     "InvalidConfigurationException", "ConfigParseException",
                     "InvalidConfigurationPropertyValueException"),
                    K.INVALID_CONFIG),
    **dict.fromkeys(("NullPointerException", "NullReferenceException", "TypeError",
                     "AttributeError", "IndexError", "ZeroDivisionError", "ArithmeticException",
                     "ArrayIndexOutOfBoundsException", "IndexOutOfRangeException",
                     "ClassCastException", "InvalidCastException", "StackOverflowError",
                     "StackOverflowException", "RecursionError", "AssertionError",
                     "AccessViolationException", "SegmentationFault", "RangeError"), K.CRASH),
}
"""Exception classes by meaning, across Python, the JVM, .NET and Node."""


def exception_kind(name: str | None) -> ErrorKind | None:
    if not name:
        return None
    return EXCEPTION_KINDS.get(name) or EXCEPTION_KINDS.get(name.rsplit(".", 1)[-1])


def status_kind(status: int, *, from_upstream: bool) -> ErrorKind | None:
    """An HTTP status's kind: 401 authentication, 403 authorization, 407 authentication at a
    proxy, 408/504 timeout, other 5xx an upstream failure when it came from one."""
    if status in (401, 407):
        return K.AUTHENTICATION
    if status == 403:
        return K.AUTHORIZATION
    if status in (408, 504) and from_upstream:
        return K.TIMEOUT if status == 408 else K.UPSTREAM_5XX
    if 500 <= status <= 599 and from_upstream:
        return K.UPSTREAM_5XX
    return None


def _rx(*patterns: str) -> re.Pattern[str]:
    """One pattern of alternatives; ``(?i)`` at an alternative's start scopes to it."""
    return re.compile("|".join(f"(?i:{p[4:]})" if p.startswith("(?i)") else f"(?:{p})"
                               for p in patterns))


TEXT_KINDS: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    (K.AUTHENTICATION, _rx(
        r"(?i)password authentication failed", r"(?i)\bauthentication failed",
        r"(?i)access denied for user", r"(?i)invalid (?:credentials|password|username or password"
        r"|api[ _-]?key|token|auth(?:entication)? token)", r"(?i)login failed for user",
        r"\bNOAUTH\b", r"\bWRONGPASS\b", r"(?i)\bbad credentials\b", r"(?i)no password supplied",
        r"(?i)authentication required", r"(?i)\b(?:token|credentials?) (?:has |have )?expired",
        r"(?i)\bunauthenticated\b", r"(?i)\b401\b[^\n]{0,20}unauthorized",
        r"(?i)(?:status|code|http)[ :=]*401\b", r"(?i)\bSASL authentication\b",
        r"(?i)\bauth(?:entication)? error\b", r"(?i)\bunauthorized\b",
    )),
    (K.AUTHORIZATION, _rx(
        r"(?i)\bforbidden\b", r"(?i)(?:status|code|http)[ :=]*403\b", r"\b403 Forbidden\b",
        r"(?i)is not authorized to perform", r"(?i)permission denied for (?:table|relation"
        r"|schema|database|sequence|function)", r"(?i)\bAccessDenied\b",
        r"(?i)insufficient (?:privileges?|permissions?|scope)", r"(?i)\bPERMISSION_DENIED\b",
        r'(?i)cannot (?:get|list|watch|create|update|patch|delete) resource "',
    )),
    (K.TLS, _rx(
        r"\bx509: ", r"(?i)certificate (?:has )?expired", r"(?i)certificate verify failed",
        r"CERTIFICATE_VERIFY_FAILED", r"(?i)\bSSLHandshakeException\b",
        r"(?i)\bssl(?:v3)? (?:alert )?handshake failure", r"(?i)unable to verify the first "
        r"certificate", r"(?i)self[- ]signed certificate", r"\btls: ",
        r"(?i)PKIX path building failed", r"(?i)unknown (?:certificate )?authority",
        r"(?i)certificate is not (?:yet )?valid", r"(?i)remote error: tls",
        r"(?i)The remote certificate is invalid", r"(?i)\bwrong version number\b",
    )),
    (K.DNS, _rx(
        r"(?i)no such host", r"(?i)Name or service not known",
        r"(?i)Temporary failure in name resolution", r"(?i)nodename nor servname",
        r"\bNXDOMAIN\b", r"(?i)could not resolve host", r"\bUnknownHostException\b",
        r"getaddrinfo (?:ENOTFOUND|EAI_AGAIN)", r"(?i)could not translate host name",
        r"(?i)failed to (?:resolve|lookup) (?:host|address|hostname|name)",
        r"(?i)\bserver misbehaving\b",
        r"(?i)No address associated with hostname", r"(?i)\bunknown host\b",
        r"(?i)\bdns error\b", r"(?i)name resolution failed",
        r"(?i)unable to resolve (?:host|hostname|address)",
    )),
    (K.OUT_OF_MEMORY, _rx(
        r"\bOutOfMemory(?:Error|Exception)\b", r"\bMemoryError\b", r"(?i)heap out of memory",
        r"(?i)\bout of memory\b", r"(?i)cannot allocate memory", r"(?i)memory allocation of "
        r"\d+ bytes failed", r"std::bad_alloc", r"(?i)Java heap space", r"(?i)\bOOM\b",
        r"(?i)GC overhead limit exceeded", r"(?i)Reached heap limit",
    )),
    (K.MISSING_CONFIG, _rx(
        r"KeyError: ['\"][A-Z][A-Z0-9_]+['\"]",
        r"(?i)env(?:ironment)?(?: variable| var)?\s+['\"`]?[A-Z][A-Z0-9_]+['\"`]?\s+(?:is\s+)?"
        r"(?:not set|unset|missing|undefined|not defined|required|empty)",
        r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+['\"`]? (?:is not set|must be set|is required|not defined"
        r"|is missing|is unset|is undefined|is empty)",
        r"(?i)missing (?:required )?(?:env(?:ironment)?(?: variable| var)?|setting"
        r"|config(?:uration)?|option|property|key|parameter|argument)s?\b",
        r"(?i)required (?:key|setting|option|property|env(?:ironment)? variable|field)s? "
        r"['\"`]?[\w.-]+['\"`]? (?:is )?missing", r"\bField required\b", r"\bfield required\b",
        r"(?i)validation errors? for \w*(?:Settings|Config)",
        r"(?i)(?:config(?:uration)?|settings?)(?: file)? (?:file )?not found",
        r"(?i)(?:no such file or directory|FileNotFound\w*)[^\n]{0,200}?\.(?:ya?ml|json|toml"
        r"|ini|conf|cfg|properties|env)\b",
        r"(?i)\.(?:ya?ml|json|toml|ini|conf|cfg|properties|env)['\"]?[^\n]{0,40}?"
        r"(?:no such file or directory|not found|does not exist)",
        r"(?i)could not resolve placeholder", r"(?i)(?:is not configured|not configured:)",
        r"(?i)required (?:config(?:uration)?|setting)", r"(?i)missing value for",
    )),
    (K.INVALID_CONFIG, _rx(
        r"(?i)unknown (?:configuration )?(?:directive|key|field|option|setting|property)\b",
        r"(?i)failed to (?:load|parse|read|validate|decode) (?:the )?config",
        r"(?i)\b(?:invalid|malformed|bad) config(?:uration)?\b",
        r"(?i)\bconfig(?:uration)? (?:error|invalid|is invalid|validation failed)\b",
        r"(?i)\b(?:yaml|toml|json|ini): (?:line \d+|unmarshal|cannot unmarshal)",
        r"(?i)error (?:parsing|loading|reading) (?:config|configuration|settings)",
        r"(?i)invalid value for (?:option|setting|flag|key)", r"\[emerg\]",
        r"(?i)flag provided but not defined", r"(?i)unrecognized (?:option|argument|arguments)",
    )),
    (K.MISSING_DEPENDENCY, _rx(
        r"\bModuleNotFoundError\b", r"(?i)No module named ", r"(?i)Cannot find module ['\"]",
        r"\bClassNotFoundException\b", r"\bNoClassDefFoundError\b",
        r"(?i)error while loading shared libraries", r"(?i)Could not load file or assembly",
        r"(?i)cannot open shared object file", r"\bERR_MODULE_NOT_FOUND\b",
    )),
    (K.MISSING_CONFIG, _rx(
        r"(?i)no such file or directory", r"\bENOENT\b", r"\bFileNotFound(?:Error|Exception)\b",
        r"\bNoSuchFileException\b", r"(?i)could not find (?:file|a part of the path)",
    )),
    (K.PERMISSION, _rx(
        r"\bEACCES\b", r"(?i)permission denied", r"(?i)read-only file system", r"\bEROFS\b",
        r"(?i)operation not permitted", r"\bEPERM\b", r"(?i)access to the path .* is denied",
    )),
    (K.TIMEOUT, _rx(
        r"(?i)timed? ?out\b", r"(?i)deadline exceeded", r"\bDEADLINE_EXCEEDED\b",
        r"\bETIMEDOUT\b", r"(?i)i/o timeout", r"(?i)\btimeout (?:exceeded|expired|awaiting"
        r"|while|after|of \d)", r"(?i)took too long", r"(?i)\bTimeout\b",
    )),
    (K.CONNECTION_REFUSED, _rx(
        r"(?i)connection refused", r"\bECONNREFUSED\b", r"(?i)actively refused",
        r"(?i)No connection could be made", r"(?i)connection reset", r"\bECONNRESET\b",
        r"(?i)no route to host", r"(?i)network is unreachable", r"(?i)host is unreachable",
        r"(?i)failed to connect", r"(?i)could not connect to", r"(?i)can'?t connect to",
        r"(?i)unable to connect", r"(?i)upstream connect error", r"(?i)connection (?:was )?closed"
        r" (?:by|unexpectedly)", r"(?i)broken pipe", r"(?i)\bEOF\b while", r"(?i)server closed"
        r" the connection unexpectedly", r"(?i)error connecting to",
    )),
    (K.UPSTREAM_5XX, _rx(
        r"\b5\d\d (?:Internal Server Error|Not Implemented|Bad Gateway|Service Unavailable"
        r"|Gateway Time-?out|Insufficient Storage)",
        r"(?i)(?:status(?: code)?|http(?: status)?|returned|response(?: code)?|responded with"
        r"|got)[ :=]*(?:status )?5\d\d\b", r"(?i)no healthy upstream",
        r"(?i)\bService Unavailable\b", r"(?i)\bBad Gateway\b", r"(?i)\bupstream (?:error|failed)",
    )),
    (K.CRASH, _rx(
        r"\bpanic: ", r"panicked at", r"\bSIGSEGV\b", r"(?i)segmentation (?:fault|violation)",
        r"(?i)core dumped", r"\bSIGABRT\b", r"\babort\(\)", r"^fatal error: ",
        r"(?i)nil pointer dereference", r"(?i)stack overflow", r"\bSIGBUS\b", r"\bSIGILL\b",
        r"\bNullPointerException\b", r"\bNullReferenceException\b", r"(?i)unhandled exception",
        r"(?i)uncaught exception", r"(?i)illegal instruction", r"(?i)double free",
    )),
)
"""Text signals, in order: the first row whose pattern matches decides. A missing file comes
after the rows that name what is missing (a variable, a setting, an invalid file): in a
container, a file the program cannot find is a mount or configuration it was not given."""

MAX_TEXT = 4_000
"""Characters of a text the table is run on."""


CREDENTIAL_KINDS = (ErrorKind.AUTHENTICATION, ErrorKind.AUTHORIZATION)


def text_kind(text: str, *, only: tuple[ErrorKind, ...] | None = None) -> Kinded | None:
    """The first row of ``TEXT_KINDS`` (of the kinds ``only`` names) that ``text`` matches."""
    text = text[:MAX_TEXT]
    for kind, pattern in TEXT_KINDS:
        if only is not None and kind not in only:
            continue
        m = pattern.search(text)
        if m is not None:
            return Kinded(kind=kind, signal=f"text {m.group(0)!r}")
    return None
