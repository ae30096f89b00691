"""`kubectl vigil console`: the operator's web console in a browser, through a port-forward.

The console is served by the operator on its API port (docs/console.md), inside the cluster.
This verb runs ``kubectl port-forward svc/<service> <local>:http`` in the operator's namespace
(as the same kubeconfig, context and user as the rest of the command), waits until the
forwarded port answers, prints the console's address and opens it in the default browser
(``--no-browser`` only prints it), then keeps the forward up until Ctrl-C. The address is
HTTPS, as the chart serves the API by default (``--plain-http`` when its ``tls.enabled`` is
false); a browser does not know the chart's own CA (the ConfigMap ``<release>-api-ca``) until it
is imported, and warns until then. The console asks
for a token at its login form; `kubectl create token SA --audience vigil` makes one (an
auth proxy in front of the Service can set ``Authorization`` instead).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import time
import webbrowser
from typing import Any

from vigil.cli.cluster import Connection, connection
from vigil.cli.errors import BadInput

DEFAULT_OPERATOR_NAMESPACE = "vigil-system"
DEFAULT_SERVICE = "vigil"
#: How long the port-forward may take to answer before the verb gives up (seconds).
FORWARD_READY_SECONDS = 30.0
#: Between two probes of the forwarded port (seconds): a person is waiting.
PROBE_SECONDS = 0.2


def port_forward_command(
    kubectl: str, *, namespace: str, service: str, local_port: int, chosen: Connection
) -> list[str]:
    """The kubectl command line that forwards `local_port` to the Service's `http` port."""
    command = [kubectl]
    if chosen.kubeconfig:
        command += ["--kubeconfig", chosen.kubeconfig]
    if chosen.context:
        command += ["--context", chosen.context]
    if chosen.impersonate:
        command += ["--as", chosen.impersonate]
    if chosen.impersonate_group:
        command += ["--as-group", chosen.impersonate_group]
    return [*command, "-n", namespace, "port-forward", f"svc/{service}", f"{local_port}:http", "--address", "127.0.0.1"]


def console_url(local_port: int, *, https: bool) -> str:
    return f"{'https' if https else 'http'}://127.0.0.1:{local_port}/console/"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_SECONDS):
            return True
    except OSError:
        return False


def cmd_console(args: argparse.Namespace) -> int:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise BadInput("console: kubectl is not on PATH (it makes the port-forward)")
    port = args.port or _free_port()
    command = port_forward_command(
        kubectl, namespace=args.operator_namespace, service=args.service, local_port=port, chosen=connection()
    )
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) as forward:
        try:
            deadline = time.monotonic() + FORWARD_READY_SECONDS
            while not _answers(port):
                if forward.poll() is not None:
                    raise BadInput(f"console: kubectl port-forward ended (exit {forward.returncode}); see its message above")
                if time.monotonic() > deadline:
                    raise BadInput(f"console: the port-forward did not answer within {FORWARD_READY_SECONDS:g}s")
                time.sleep(PROBE_SECONDS)
            url = console_url(port, https=not args.plain_http)
            print(f"Vigil console at {url} (Ctrl-C to stop)", flush=True)
            if not args.no_browser:
                webbrowser.open(url)
            forward.wait()
        except KeyboardInterrupt:
            pass
        finally:
            forward.terminate()
    return 0


def add_parsers(sub: Any) -> None:
    """Register `console` on the CLI's subparsers."""
    p = sub.add_parser("console", help="open the operator's web console through a port-forward")
    p.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE, help="where the operator runs (default vigil-system)")
    p.add_argument("--service", default=DEFAULT_SERVICE, help="the operator's Service (default vigil, the chart's for a release named vigil)")
    p.add_argument("--port", type=int, default=0, help="the local port (default: a free one)")
    p.add_argument(
        "--plain-http", action="store_true",
        help="the API is served without TLS (the chart's tls.enabled: false); by default it is HTTPS",
    )  # fmt: skip
    p.add_argument("--no-browser", action="store_true", help="print the address only")
    p.set_defaults(func=cmd_console)
