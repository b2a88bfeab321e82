"""The log reader: every runtime's trace shape, every structured format, the decisive line
chosen by meaning, the kind, the entities, and upstream failures over time.

The samples are written from the runtimes' real output formats (CPython 3.11, Go 1.21,
OpenJDK 17 with Spring Boot, Node.js 20, .NET 8, Rust 1.74 and 1.70).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopkernel_apps.sre._logs import (
    ErrorKind,
    Format,
    Level,
    Runtime,
    read_log,
)

K = ErrorKind


def lines(text: str) -> str:
    """A sample as a container writes it (no indentation of the test source)."""
    return "\n".join(line.removeprefix("|") for line in text.strip("\n").split("\n")) + "\n"


# --- runtimes -----------------------------------------------------------------------------

PYTHON_CHAINED = lines('''
|2026-12-03 10:00:00,001 INFO [app] starting worker pid=7
|Traceback (most recent call last):
|  File "/app/app/settings.py", line 12, in load
|    url = os.environ["DATABASE_URL"]
|          ~~~~~~~~~~^^^^^^^^^^^^^^^^
|  File "<frozen os>", line 679, in __getitem__
|KeyError: 'DATABASE_URL'
|
|The above exception was the direct cause of the following exception:
|
|Traceback (most recent call last):
|  File "/app/main.py", line 3, in <module>
|    settings = load()
|  File "/app/app/settings.py", line 14, in load
|    raise ConfigError("DATABASE_URL is not set") from exc
|app.errors.ConfigError: DATABASE_URL is not set
''')


def test_python_chained_traceback_cites_the_innermost_cause() -> None:
    reading = read_log(PYTHON_CHAINED, container="worker")
    d = reading.decisive
    assert d is not None
    assert d.record.format is Format.TRACE
    assert d.record.trace is not None and d.record.trace.runtime is Runtime.PYTHON
    assert (d.record.first_line, d.record.last_line) == (2, 16)
    assert d.line == 7 and d.quote == "KeyError: 'DATABASE_URL'"
    assert [c.exception_type for c in d.record.trace.chain] == ["app.errors.ConfigError",
                                                                "KeyError"]
    assert d.record.trace.innermost.frame == "<frozen os>:679 in __getitem__"
    assert d.kind is K.MISSING_CONFIG
    assert d.entities.config_key == "DATABASE_URL"
    assert d.entities.exception_type == "KeyError"
    assert (4, '    url = os.environ["DATABASE_URL"]') in d.context
    assert reading.record_count == 2


PYTHON_DURING_HANDLING = lines('''
|Traceback (most recent call last):
|  File "/usr/local/lib/python3.11/site-packages/psycopg2/__init__.py", line 122, in connect
|    conn = _connect(dsn, connection_factory=connection_factory, **kwasync)
|psycopg2.OperationalError: connection to server at "orders-db" (10.96.4.12), port 5432 failed: FATAL:  password authentication failed for user "orders"
|
|
|During handling of the above exception, another exception occurred:
|
|Traceback (most recent call last):
|  File "/app/worker.py", line 40, in <module>
|    main()
|RuntimeError: database unavailable after 5 attempts
|worker exited with code 1
''')  # noqa: E501


def test_password_authentication_failed_is_authentication_not_a_connection_failure() -> None:
    reading = read_log(PYTHON_DURING_HANDLING)
    d = reading.decisive
    assert d is not None
    assert d.line == 4  # the innermost cause, not the wrapper line after the trace
    assert d.kind is K.AUTHENTICATION
    assert d.entities.user == "orders"
    assert d.entities.port == 5432
    for text in (
        'FATAL: password authentication failed for user "app" at orders-db:5432\n',
        'level=error msg="could not connect to orders-db:5432" '
        'err="pq: password authentication failed for user \\"app\\""\n',
        '{"level":"error","msg":"failed to connect to db","host":"10.0.0.5:5432",'
        '"error":"FATAL: password authentication failed for user \\"app\\""}\n',
    ):
        assert read_log(text).kind is K.AUTHENTICATION, text


PYDANTIC = lines('''
|Traceback (most recent call last):
|  File "/app/main.py", line 8, in <module>
|    settings = Settings()
|  File "/usr/local/lib/python3.12/site-packages/pydantic_settings/main.py", line 84, in __init__
|    super().__init__(
|pydantic_core._pydantic_core.ValidationError: 1 validation error for Settings
|redis_url
|  Field required [type=missing, input_value={}, input_type=dict]
|    For further information visit https://errors.pydantic.dev/2.5/v/missing
''')


def test_pydantic_settings_validation_error_is_missing_config_with_the_field() -> None:
    d = read_log(PYDANTIC).decisive
    assert d is not None and d.line == 6
    assert d.record.last_line == 9
    assert d.kind is K.MISSING_CONFIG
    assert d.entities.config_key == "redis_url"


GO_PANIC = lines('''
|2026/12/03 10:00:00 loading config from /etc/orders/config.yaml
|2026/12/03 10:00:00 connecting to postgres
|panic: runtime error: invalid memory address or nil pointer dereference
|[signal SIGSEGV: segmentation violation code=0x1 addr=0x10 pc=0x6b2f9a]
|
|goroutine 1 [running]:
|main.(*Store).Ping(0x0)
|	/src/internal/store/store.go:88 +0x1a
|main.main()
|	/src/cmd/orders/main.go:41 +0x2f5
|exit status 2
''')


def test_go_panic_is_one_record_with_its_first_own_frame() -> None:
    reading = read_log(GO_PANIC)
    d = reading.decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.GO
    assert (d.record.first_line, d.record.last_line) == (3, 11)
    assert d.line == 3
    assert d.kind is K.CRASH
    assert d.record.trace.innermost.frame == "main.(*Store).Ping /src/internal/store/store.go:88"
    assert d.record.trace.innermost.exception_type == "runtime error"
    assert reading.record_count == 3


def test_go_panic_on_an_error_value_takes_the_error_s_kind() -> None:
    text = lines('''
|panic: dial tcp 10.96.0.21:6379: connect: connection refused
|
|goroutine 1 [running]:
|main.main()
|	/app/main.go:17 +0x1d
''')
    d = read_log(text).decisive
    assert d is not None
    assert d.kind is K.CONNECTION_REFUSED
    assert (d.entities.host, d.entities.port) == ("10.96.0.21", 6379)


def test_go_fatal_error_out_of_memory() -> None:
    text = ("fatal error: runtime: out of memory\n\nruntime stack:\n"
            "runtime.throw({0x9d3c1c, 0x16})\n")
    d = read_log(text).decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.GO
    assert d.kind is K.OUT_OF_MEMORY


JAVA = lines('''
|2026-12-03T10:00:01.123Z  INFO 1 --- [main] o.s.b.w.e.tomcat.TomcatWebServer : Tomcat initialized with port 8080 (http)
|2026-12-03T10:00:02.456Z ERROR 1 --- [main] o.s.boot.SpringApplication : Application run failed
|org.springframework.beans.factory.BeanCreationException: Error creating bean with name 'entityManagerFactory': Unable to open JDBC Connection
|	at org.springframework.beans.factory.support.AbstractAutowireCapableBeanFactory.initializeBean(AbstractAutowireCapableBeanFactory.java:1786)
|	at org.springframework.boot.SpringApplication.run(SpringApplication.java:1306)
|	at com.acme.orders.OrdersApplication.main(OrdersApplication.java:10)
|Caused by: org.hibernate.exception.JDBCConnectionException: Unable to open JDBC Connection for DDL execution
|	at org.hibernate.exception.internal.SQLStateConversionDelegate.convert(SQLStateConversionDelegate.java:100)
|	... 28 common frames omitted
|Caused by: java.net.UnknownHostException: orders-db.prod.svc.cluster.local
|	at java.base/sun.nio.ch.NioSocketImpl.connect(NioSocketImpl.java:567)
|	at java.base/java.net.Socket.connect(Socket.java:633)
|	... 45 common frames omitted
''')  # noqa: E501


def test_java_trace_cites_the_innermost_caused_by() -> None:
    reading = read_log(JAVA)
    d = reading.decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.JAVA
    assert d.line == 10
    assert d.quote.startswith("Caused by: java.net.UnknownHostException")
    assert len(d.record.trace.chain) == 3
    assert d.record.trace.innermost.frame == (
        "java.base/sun.nio.ch.NioSocketImpl.connect(NioSocketImpl.java:567)"
    )
    assert d.kind is K.DNS
    assert d.signal == "exception java.net.UnknownHostException"
    assert d.entities.exception_type == "java.net.UnknownHostException"
    assert reading.errors[0].record.level is Level.ERROR  # the Spring line before the trace


def test_java_uncaught_out_of_memory() -> None:
    text = lines('''
|Exception in thread "main" java.lang.OutOfMemoryError: Java heap space
|	at java.base/java.util.Arrays.copyOf(Arrays.java:3537)
|	at com.acme.Cache.load(Cache.java:42)
''')
    d = read_log(text).decisive
    assert d is not None and d.record.level is Level.FATAL
    assert d.kind is K.OUT_OF_MEMORY and d.line == 1


NODE = lines('''
|{"level":30,"time":1764756000000,"pid":1,"msg":"server starting"}
|node:events:492
|      throw er; // Unhandled 'error' event
|      ^
|
|Error: connect ECONNREFUSED 10.0.0.7:6379
|    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1555:16)
|Emitted 'error' event on Redis instance at:
|    at Redis.emit (node:events:514:28) {
|  errno: -111,
|  code: 'ECONNREFUSED',
|  syscall: 'connect',
|  address: '10.0.0.7',
|  port: 6379
|}
|
|Node.js v20.10.0
''')


def test_node_error_with_its_code_block() -> None:
    d = read_log(NODE).decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.NODE
    assert d.line == 6
    assert d.kind is K.CONNECTION_REFUSED
    assert d.signal == "errno ECONNREFUSED"
    assert (d.entities.host, d.entities.port) == ("10.0.0.7", 6379)


def test_node_fetch_failed_cites_the_cause() -> None:
    text = lines('''
|TypeError: fetch failed
|    at Object.fetch (node:internal/deps/undici/undici:11730:11)
|    at async main (/app/index.js:12:5) {
|  [cause]: Error: getaddrinfo ENOTFOUND inventory.prod.svc
|      at GetAddrInfoReqWrap.onlookup [as oncomplete] (node:dns:107:26) {
|    errno: -3008,
|    code: 'ENOTFOUND',
|    syscall: 'getaddrinfo',
|    hostname: 'inventory.prod.svc'
|  }
|}
''')
    d = read_log(text).decisive
    assert d is not None and d.line == 4
    assert d.kind is K.DNS
    assert d.entities.host == "inventory.prod.svc"
    assert d.entities.errno == "ENOTFOUND"


def test_node_unhandled_rejection_and_heap_out_of_memory() -> None:
    rejection = lines('''
|node:internal/process/promises:289
|            triggerUncaughtException(err, true /* fromPromise */);
|            ^
|
|[UnhandledPromiseRejection: This error originated either by throwing inside of an async function without a catch block, or by rejecting a promise which was not handled with .catch(). The promise rejected with the reason "Missing required environment variable STRIPE_KEY".] {
|  code: 'ERR_UNHANDLED_REJECTION'
|}
''')  # noqa: E501
    d = read_log(rejection).decisive
    assert d is not None and d.line == 5
    assert d.kind is K.MISSING_CONFIG
    assert d.entities.config_key == "STRIPE_KEY"
    heap = lines('''
|<--- Last few GCs --->
|[1:0x5f1c2a0]    60123 ms: Mark-Compact 2046.1 (2083.4) -> 2045.6 (2084.1) MB
|
|FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory
| 1: 0xb7a940 node::Abort() [node]
''')
    d = read_log(heap).decisive
    assert d is not None and d.record.level is Level.FATAL
    assert d.kind is K.OUT_OF_MEMORY and d.line == 4


DOTNET = lines('''
|info: Microsoft.Hosting.Lifetime[14]
|      Now listening on: http://[::]:8080
|Unhandled exception. System.InvalidOperationException: An exception has been raised that is likely due to a transient failure.
| ---> Npgsql.NpgsqlException (0x80004005): Failed to connect to 10.0.3.9:5432
| ---> System.Net.Sockets.SocketException (111): Connection refused
|   at Npgsql.Internal.NpgsqlConnector.Connect(NpgsqlTimeout timeout)
|   --- End of inner exception stack trace ---
|   at Npgsql.Internal.NpgsqlConnector.Open(NpgsqlTimeout timeout, Boolean async)
|   --- End of inner exception stack trace ---
|   at Microsoft.EntityFrameworkCore.Storage.ExecutionStrategy.Execute()
|   at Program.<Main>$(String[] args) in /src/Program.cs:line 21
''')  # noqa: E501


def test_dotnet_inner_exceptions() -> None:
    d = read_log(DOTNET).decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.DOTNET
    assert (d.record.first_line, d.record.last_line) == (3, 11)
    assert d.line == 5
    assert d.record.trace.innermost.exception_type == "System.Net.Sockets.SocketException"
    assert d.kind is K.CONNECTION_REFUSED
    assert (d.entities.host, d.entities.port) == ("10.0.3.9", 5432)


def test_rust_panics_old_and_new_format() -> None:
    new = lines('''
|thread 'main' panicked at src/main.rs:22:10:
|called `Result::unwrap()` on an `Err` value: Os { code: 13, kind: PermissionDenied, message: "Permission denied" }
|note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
''')  # noqa: E501
    d = read_log(new).decisive
    assert d is not None and d.record.trace is not None
    assert d.record.trace.runtime is Runtime.RUST
    assert d.line == 2 and d.record.last_line == 3
    assert d.record.trace.innermost.frame == "src/main.rs:22:10"
    assert d.kind is K.PERMISSION
    old = ("thread 'main' panicked at 'index out of bounds: the len is 3 but the index is 7', "
           "src/lib.rs:4:5\nnote: run with `RUST_BACKTRACE=1` environment variable\n")
    d = read_log(old).decisive
    assert d is not None and d.kind is K.CRASH and d.signal == "rust panic"
    assert d.record.trace is not None and d.record.trace.innermost.frame == "src/lib.rs:4:5"


# --- structured formats -------------------------------------------------------------------


def test_json_lines_nested_error_and_embedded_stack() -> None:
    text = "\n".join([
        json.dumps({"ts": "2026-12-03T10:00:00Z", "level": "info", "msg": "listening",
                    "logger": "http"}),
        json.dumps({"ts": "2026-12-03T10:00:05Z", "severity": "ERROR", "message": "payment",
                    "error": {"message": "x509: certificate has expired or is not yet valid",
                              "type": "tls"},
                    "url": "https://psp.example.com/v1/charge"}),
    ]) + "\n"
    reading = read_log(text)
    d = reading.decisive
    assert d is not None and d.record.format is Format.JSON
    assert d.line == 2 and d.record.level is Level.ERROR
    assert d.record.error == "x509: certificate has expired or is not yet valid"
    assert d.kind is K.TLS
    assert d.entities.host == "psp.example.com"
    assert d.entities.url == "https://psp.example.com/v1/charge"
    assert reading.records[0].seconds == 1796292000.0


def test_logfmt_with_fatal_wrapper_after_the_cause() -> None:
    text = lines('''
|time="2026-12-03T10:00:00Z" level=info msg="starting orders" version=1.4.2
|time="2026-12-03T10:00:01Z" level=error msg="cannot open config" err="open /etc/orders/config.yaml: no such file or directory"
|time="2026-12-03T10:00:01Z" level=fatal msg="exiting"
''')  # noqa: E501
    reading = read_log(text)
    d = reading.decisive
    assert d is not None and d.record.format is Format.LOGFMT
    assert d.line == 2  # "exiting" only says the program ends
    assert d.kind is K.MISSING_CONFIG
    assert d.entities.path == "/etc/orders/config.yaml"
    assert [e.line for e in reading.errors] == [2, 3]


def test_plain_prefixes_kubectl_klog_and_go_log() -> None:
    text = lines('''
|2026-12-03T10:00:00.123456789Z I1203 10:00:00.123456       1 main.go:40] starting controller
|2026-12-03T10:00:01.000000000Z E1203 10:00:01.000000       1 reflector.go:147] pkg/mod/k8s.io/client-go/tools/cache/reflector.go:229: Failed to watch *v1.Pod: pods is forbidden: User "system:serviceaccount:ops:watcher" cannot list resource "pods" in API group "" at the cluster scope
''')  # noqa: E501
    reading = read_log(text)
    d = reading.decisive
    assert d is not None and d.line == 2
    assert d.record.level is Level.ERROR
    assert d.record.timestamp == "2026-12-03T10:00:01.000000000Z"
    assert d.kind is K.AUTHORIZATION
    go = "2026/12/03 10:00:00 listening on :8080\n2026/12/03 10:00:09 failed to reach " \
         "http://ledger:9000/health: dial tcp: lookup ledger on 10.96.0.10:53: no such host\n"
    d = read_log(go).decisive
    assert d is not None and d.line == 2 and d.record.level is Level.NONE
    assert d.kind is K.DNS
    assert d.entities.host == "ledger" and d.entities.port == 9000


# --- choosing by meaning ------------------------------------------------------------------


def test_an_error_followed_by_recovery_is_not_decisive() -> None:
    text = lines('''
|{"level":"error","msg":"request failed","status":503,"upstream":"inventory:8080"}
|{"level":"warn","msg":"retrying in 1s"}
|{"level":"info","msg":"request ok","status":200,"upstream":"inventory:8080"}
|{"level":"info","msg":"request ok","status":200,"upstream":"inventory:8080"}
''')
    reading = read_log(text, container="web")
    assert reading.decisive is None and reading.kind is None
    assert reading.recovery is not None
    assert (reading.recovery.error.line, reading.recovery.line) == (1, 3)
    assert reading.summary().startswith("Container web: the error at line 1 (upstream_5xx)")
    assert reading.upstream_failures[0].ended


def test_success_from_another_upstream_is_no_recovery() -> None:
    text = lines('''
|{"level":"error","msg":"request failed","status":502,"upstream":"inventory:8080"}
|{"level":"info","msg":"request ok","status":200,"upstream":"pricing:8080"}
''')
    d = read_log(text).decisive
    assert d is not None and d.kind is K.UPSTREAM_5XX and d.entities.upstream == "inventory:8080"


def test_the_last_error_before_the_end_wins_over_earlier_ones() -> None:
    text = lines('''
|2026-12-03T10:00:00Z ERROR cache warmup failed: redis timeout after 2s
|2026-12-03T10:00:01Z INFO serving
|2026-12-03T10:00:09Z ERROR [db] Access denied for user 'shop'@'10.1.2.3' (using password: YES)
''')
    reading = read_log(text)
    assert reading.decisive is not None and reading.decisive.line == 3
    assert reading.kind is K.AUTHENTICATION and reading.decisive.entities.user == "shop"
    assert [e.kind for e in reading.errors] == [K.TIMEOUT, K.AUTHENTICATION]


def test_no_error_and_warnings_are_never_decisive() -> None:
    quiet = read_log("INFO ready\nINFO request served in 3ms\n", container="api")
    assert quiet.decisive is None and quiet.recovery is None and quiet.warnings == ()
    assert quiet.summary() == "Container api: no error in 2 lines."
    warned = read_log("INFO ready\nWARN upstream payments:8080 timed out, retrying\n"
                      "WARN slow request\n")
    assert warned.decisive is None
    [warning] = warned.warnings
    assert warning.kind is K.TIMEOUT and warning.line == 2
    assert warning.entities.upstream == "payments:8080"
    assert warned.summary() == (
        "The log: no error in 3 lines; its last warning that names a failure is line 2 "
        "(timeout): WARN upstream payments:8080 timed out, retrying."
    )
    assert read_log("").summary() == "The log: no error in 0 lines."


def test_upstream_answered_503_for_ten_seconds() -> None:
    rows = [{"ts": f"2026-12-03T10:00:{s:02d}Z", "level": "warn", "msg": "upstream",
             "status": 503, "upstream": "http://payments:8080/charge"} for s in range(0, 11, 2)]
    rows.insert(3, {"ts": "2026-12-03T10:00:05Z", "level": "info", "msg": "ok", "status": 200,
                    "upstream": "http://ledger:9000/"})
    rows.append({"ts": "2026-12-03T10:00:11Z", "level": "info", "msg": "probe",
                 "path": "/healthz", "status": 500})  # our own answer: no upstream named
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    reading = read_log(text)
    [failure] = reading.upstream_failures
    assert failure.upstream == "payments:8080"
    assert failure.statuses == (503,) and failure.count == 6
    assert (failure.first_line, failure.last_line) == (1, 7)
    assert failure.duration_seconds == 10.0 and not failure.ended
    assert "Upstream payments:8080 answered 503 for 10 s (6 answers, lines 1-7, until the end " \
           "of the log)." in reading.summary()


def test_logfmt_upstream_status_series_with_recovery_in_between() -> None:
    text = "".join(
        f'ts=2026-12-03T10:00:{s:02d}Z level=info upstream=auth:7000 status={code} msg=call\n'
        for s, code in enumerate([500, 502, 200, 504])
    )
    failures = read_log(text).upstream_failures
    assert [(f.first_line, f.last_line, f.statuses, f.ended) for f in failures] == [
        (1, 2, (500, 502), True), (4, 4, (504,), False)]


def test_summary_is_deterministic_and_names_the_entities() -> None:
    a, b = read_log(JAVA, container="orders"), read_log(JAVA, container="orders")
    assert a.summary() == b.summary()
    assert a.summary().startswith("Container orders: decisive line 10 (dns, exception "
                                  "java.net.UnknownHostException): Caused by:")
    assert "[upstream orders-db.prod.svc.cluster.local; exception java.net.UnknownHostException]" \
        in a.summary()


# --- kinds from one line ------------------------------------------------------------------

ONE_LINE_KINDS = [
    ("ERROR dial tcp 10.0.0.9:5432: connect: connection refused", K.CONNECTION_REFUSED),
    ("ERROR redis: read tcp 10.1.1.4:40022->10.0.0.9:6379: read: connection reset by peer",
     K.CONNECTION_REFUSED),
    ("error: could not translate host name \"db\" to address: Name or service not known",
     K.DNS),
    ('{"level":"error","msg":"lookup failed","code":"EAI_AGAIN","hostname":"api.internal"}',
     K.DNS),
    ("ERROR Get \"http://catalog:8080/items\": context deadline exceeded", K.TIMEOUT),
    ("ERROR java.net.SocketTimeoutException: Read timed out", K.TIMEOUT),
    ("ERROR tls: failed to verify certificate: x509: certificate signed by unknown authority",
     K.TLS),
    ("ERROR javax.net.ssl.SSLHandshakeException: PKIX path building failed", K.TLS),
    ("ERROR upstream answered 401 Unauthorized", K.AUTHENTICATION),
    ("ERROR (1045, \"Access denied for user 'root'@'10.2.0.4' (using password: YES)\")",
     K.AUTHENTICATION),
    ("ERROR redis: NOAUTH Authentication required.", K.AUTHENTICATION),
    ('{"level":"error","msg":"s3 put failed","status":403,"url":"https://s3.amazonaws.com/b"}',
     K.AUTHORIZATION),
    ("ERROR permission denied for table orders", K.AUTHORIZATION),
    ('{"level":"error","msg":"charge failed","status":503,"upstream":"payments:8080"}',
     K.UPSTREAM_5XX),
    ("ERROR GET http://pricing/quote returned 502 Bad Gateway", K.UPSTREAM_5XX),
    ("ERROR environment variable API_TOKEN is not set", K.MISSING_CONFIG),
    ("FATAL required key REDIS_ADDR missing value", K.MISSING_CONFIG),
    ("ERROR Could not resolve placeholder 'spring.datasource.url' in value", K.MISSING_CONFIG),
    ("nginx: [emerg] unknown directive \"proxy_passs\" in /etc/nginx/conf.d/default.conf:14",
     K.INVALID_CONFIG),
    ("FATAL failed to parse config: toml: line 7 (last key \"index.shards\")", K.INVALID_CONFIG),
    ("ERROR Error: Cannot find module 'express'", K.MISSING_DEPENDENCY),
    ("ERROR java.lang.NoClassDefFoundError: org/slf4j/LoggerFactory", K.MISSING_DEPENDENCY),
    ("/app/bin/server: error while loading shared libraries: libssl.so.3: cannot open shared "
     "object file: No such file or directory", K.MISSING_DEPENDENCY),
    ("ERROR open /var/lib/app/data.db: permission denied", K.PERMISSION),
    ("ERROR [Errno 30] Read-only file system: '/app/cache/x'", K.PERMISSION),
    ("fatal: mkdir /data: operation not permitted", K.PERMISSION),
    ("ERROR MemoryError", K.OUT_OF_MEMORY),
    ("FATAL memory allocation of 4294967296 bytes failed", K.OUT_OF_MEMORY),
    ("Segmentation fault (core dumped)", K.CRASH),
    ("ERROR something unexpected happened", K.OTHER),
]


@pytest.mark.parametrize(("line", "kind"), ONE_LINE_KINDS)
def test_one_line_kind(line: str, kind: ErrorKind) -> None:
    d = read_log(line + "\n").decisive
    assert d is not None
    assert d.kind is kind, d.signal


def test_every_kind_has_a_sample() -> None:
    assert {kind for _, kind in ONE_LINE_KINDS} == set(ErrorKind)


def test_entities_of_one_line() -> None:
    d = read_log('ERROR [Errno 2] No such file or directory: "/etc/app/settings.toml"\n').decisive
    assert d is not None and d.kind is K.MISSING_CONFIG
    assert d.entities.path == "/etc/app/settings.toml"
    d = read_log("ERROR POST https://api.stripe.com/v1/charges: status 503\n").decisive
    assert d is not None
    assert d.entities.status == 503 and d.entities.host == "api.stripe.com"
    assert d.entities.url == "https://api.stripe.com/v1/charges"


# --- robustness and size ------------------------------------------------------------------

_FRAGMENTS = st.sampled_from([
    "Traceback (most recent call last):", '  File "/a.py", line 1, in f', "KeyError: 'X'",
    "panic: boom", "goroutine 1 [running]:", "\tat a.b.C(C.java:1)", "Caused by: a.B: c",
    "Error: x", "    at f (/a.js:1:1) {", "  code: 'ECONNREFUSED',", "}", "  [cause]: Error: y",
    "Unhandled exception. System.X: y", " ---> System.Y: z", "   at A.B()",
    "thread 'main' panicked at src/main.rs:1:1:", "note: run with `RUST_BACKTRACE=1`",
    '{"level":"error","status":503,"upstream":"a:1","ts":"2026-12-03T10:00:00Z"}', "{", "{]",
    'level=error msg="x', "level=error err=", "E1203 10:00:00.1 1 a.go:1] x",
    "2026-13-45T99:99:99Z ERROR bad date", "FATAL ERROR: y", "[UnhandledPromiseRejection: ",
    "", " ", "During handling of the above exception, another exception occurred:",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=60)), max_size=40))
def test_read_log_never_raises_and_keeps_its_bounds(parts: list[str]) -> None:
    text = "\n".join(parts)
    reading = read_log(text)
    split = text.split("\n")
    assert reading.line_count == len(split) - (1 if split[-1] == "" else 0)
    assert len(reading.records) <= 200 and len(reading.errors) <= 50
    numbers = [n for r in reading.records for n in (r.first_line, r.last_line)]
    assert numbers == sorted(numbers)
    if reading.decisive is not None:
        assert 1 <= reading.decisive.line <= reading.line_count
    assert reading.summary() == read_log(text).summary()


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    read_log(text).summary()


def test_a_5000_line_log_is_read_whole_and_bounded() -> None:
    body = [
        json.dumps({"ts": f"2026-12-03T10:{i // 60 % 60:02d}:{i % 60:02d}Z", "level": "info",
                    "msg": "served", "status": 200, "upstream": "cache:6379"})
        for i in range(5000)
    ]
    text = "\n".join(body) + "\n" + PYTHON_CHAINED
    reading = read_log(text)
    assert reading.line_count == 5016 and reading.record_count == 5002
    assert len(reading.records) == 200
    assert reading.decisive is not None and reading.decisive.line == 5007
    assert reading.kind is K.MISSING_CONFIG


@pytest.mark.parametrize("line", [
    "a:" * 4000, "/a" * 4000, '"' * 8000, "x=" * 4000, "{" * 8000, "Error: " * 1000,
    "1.1.1.1:" * 1000, "\t" * 8000, "level=error msg=\"" + "\\" * 7000,
    "ERROR " + "failed to connect to " * 300, "http://" + "a" * 7900,
])
def test_pathological_lines_are_read(line: str) -> None:
    reading = read_log((line + "\n") * 20)
    assert reading.line_count == 20


# --- what real dumps hold -----------------------------------------------------------------


def test_traces_under_kubectl_timestamps_keep_their_shape() -> None:
    stamped = "".join(
        f"2026-12-03T10:00:0{n % 10}.000000000Z {line}\n"
        for n, line in enumerate(PYTHON_CHAINED.splitlines())
    )
    d = read_log(stamped).decisive
    assert d is not None and d.record.trace is not None
    assert d.line == 7 and d.kind is K.MISSING_CONFIG
    assert d.record.trace.innermost.frame == "<frozen os>:679 in __getitem__"
    java = "".join(f"2026-12-03T10:00:01.000Z {line}\n" for line in JAVA.splitlines())
    d = read_log(java).decisive
    assert d is not None and d.line == 10 and d.kind is K.DNS


GUNICORN = lines('''
|[2026-12-01 14:26:03 +0000] [1] [INFO] Booting worker with pid: 7
|[2026-12-01 14:26:04 +0000] [7] [ERROR] Exception in worker process
|Traceback (most recent call last):
|  File "/usr/local/lib/python3.12/site-packages/gunicorn/arbiter.py", line 609, in spawn_worker
|    worker.init_process()
|  File "/app/report_api/export.py", line 4, in <module>
|    import pyarrow.parquet as pq
|ModuleNotFoundError: No module named 'pyarrow'
|[2026-12-01 14:26:04 +0000] [7] [INFO] Worker exiting (pid: 7)
|[2026-12-01 14:26:04 +0000] [1] [ERROR] Worker (pid:7) exited with code 3
|[2026-12-01 14:26:04 +0000] [1] [ERROR] Shutting down: Master
|[2026-12-01 14:26:04 +0000] [1] [ERROR] Reason: Worker failed to boot.
''')


def test_generic_lines_after_a_trace_step_back_to_it() -> None:
    reading = read_log(GUNICORN)
    assert reading.records[1].level is Level.ERROR  # gunicorn's bracketed level
    d = reading.decisive
    assert d is not None and d.line == 8
    assert d.kind is K.MISSING_DEPENDENCY
    text = lines('''
|2026-11-30T09:18:40.000Z ERROR environment variable SMTP_HOST is not set
|2026-11-30T09:18:40.001Z FATAL notifier cannot start without a mail relay
''')
    d = read_log(text).decisive
    assert d is not None and d.line == 1 and d.entities.config_key == "SMTP_HOST"


def test_a_generic_error_far_after_another_stays_decisive() -> None:
    text = lines('''
|ERROR cache warmup: redis timeout after 2s
|INFO serving
|INFO serving
|INFO serving
|INFO serving
|ERROR duplicate key value violates unique constraint "contacts_email_key"
''')
    d = read_log(text).decisive
    assert d is not None and d.line == 6 and d.kind is K.OTHER


def test_a_server_s_own_answers_are_no_recovery_of_its_dependency() -> None:
    text = lines('''
|{"level":"error","msg":"health check failed","check":"orders-db","err":"pool exhausted"}
|{"level":"info","route":"/api/search","status":200,"dur_ms":31}
|{"level":"error","msg":"cache rebuilt after error","err":"stale cache","recovered":true}
|{"level":"info","route":"/api/products/1","status":200,"dur_ms":12}
''')
    reading = read_log(text)
    assert reading.recovery is not None and reading.recovery.line == 3  # says so itself
    only_health = read_log("".join(text.splitlines(keepends=True)[:2]))
    assert only_health.decisive is not None and only_health.decisive.line == 1


def test_envoy_levels_and_plain_upstream_answers_over_time() -> None:
    text = lines('''
|[2026-12-01 14:20:11.021][1][warning][config] [source/common/config/grpc_stream.h:191] StreamAggregatedResources gRPC config stream to xds-cluster closed: 14, upstream connect error
|2026-11-30T09:17:15.000Z WARN upstream pricing.prod.svc.cluster.local:8443 answered 503 Service Unavailable after 10002ms (GET /v2/price)
|2026-11-30T09:17:30.000Z WARN upstream pricing.prod.svc.cluster.local:8443 answered 503 Service Unavailable after 10002ms (GET /v2/price)
|2026-11-30T09:17:45.000Z WARN upstream pricing.prod.svc.cluster.local:8443 answered 503 Service Unavailable after 10002ms (GET /v2/price)
|2026-11-30T09:17:55.000Z INFO received SIGTERM, shutting down
''')  # noqa: E501
    reading = read_log(text, container="quotes")
    assert reading.records[0].level is Level.WARNING
    assert reading.decisive is None
    assert [w.kind for w in reading.warnings] == [K.CONNECTION_REFUSED] + [K.UPSTREAM_5XX] * 3
    [failure] = reading.upstream_failures
    assert failure.upstream == "pricing.prod.svc.cluster.local:8443"
    assert (failure.count, failure.duration_seconds, failure.first_line) == (3, 30.0, 2)
    assert "answered 503 for 30 s (3 answers, lines 2-4, until the end of the log)" in \
        reading.summary()


def test_a_failed_log_request_is_never_the_program_s_error() -> None:
    text = ('Request log error: container "rules-engine" in pod is terminated, '
            "unable to retrieve container logs\n")
    reading = read_log(text, container="rules-engine")
    assert reading.decisive is None and reading.errors == ()
    assert reading.request_errors[0][0] == 1
    assert reading.summary().startswith("The log of container rules-engine could not be read")


def test_wrapper_with_an_error_field_steps_back_to_the_panic() -> None:
    text = lines('''
|panic: assignment to entry in nil map
|
|goroutine 1 [running]:
|main.(*Rules).Load(0xc0000a2000)
|	/src/rules/load.go:57 +0x1c5
|time="2026-11-30T09:18:40Z" level=error msg="rules-engine stopped" error="exit status 2"
''')
    d = read_log(text).decisive
    assert d is not None and d.line == 1 and d.kind is K.CRASH


def test_to_json_is_plain_json() -> None:
    for text in (JAVA, NODE, GUNICORN, PYTHON_DURING_HANDLING, "", "INFO ok\n"):
        value = read_log(text, container="c").to_json()
        assert json.loads(json.dumps(value)) == value
    value = read_log(JAVA).to_json()
    assert value["kind"] == "dns" and value["decisive"]["line"] == 10
    assert value["decisive"]["chain"][-1]["exception_type"] == "java.net.UnknownHostException"
