"""`vigil`, `kubectl-vigil` and `python -m vigil`: the one entry point, above both roots.

`vigil operator` and `vigil watchdog` run the operator's composition root
(`vigil.runtime`); every other verb is the kubectl plugin (`vigil.cli`). This is
the only module that knows both, so the layers contract in pyproject.toml can
keep the CLI from ever importing the runtime: the CLI parses the two verbs (so
`--help` lists them) and hands them back through the `serve` it is given.

The runtime is imported only when one of its verbs is asked for, so a plugin
verb does not pay for loading the HTTP API and every adapter.

`vigil worker` runs the volume tier's worker SDK (`vigil.worker.command`). It is
dispatched before the CLI is imported, and this module imports nothing at its
top but `sys`: a worker process loads no Kubernetes client, no models, no YAML
(tests/unit/test_worker_imports.py keeps it so).

`kubectl_complete-vigil` (`complete`) answers kubectl's own shell completion of the plugin.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def serve(command: str, config: Path | None) -> int:
    """Run `vigil operator` or `vigil watchdog` with the settings read from `config`."""
    from vigil import runtime
    from vigil.cli.consolewrites import ViewerWrites
    from vigil.settings import load_settings

    # The console's writes are the CLI's verbs made with the viewer's token: handed down from
    # here, the one module that knows both the runtime and the CLI.
    return runtime.main(load_settings(config), watchdog_only=command == "watchdog", console_writes=ViewerWrites())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["worker"]:
        from vigil.worker import command

        return command.main(args[1:])
    from vigil.cli import main as cli

    return cli.main(args, serve=serve)


def complete(argv: Sequence[str] | None = None) -> int:
    """`kubectl_complete-vigil WORDS...`: what kubectl runs to complete `kubectl vigil WORDS` (1.26+)."""
    from vigil.cli import completion
    from vigil.cli import main as cli

    words = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(completion.cobra_answer(completion.candidates(cli.parser(), words)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
