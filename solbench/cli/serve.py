"""`solbench serve`: a warm evaluation service for this host's devices (docs/agents.md)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from solbench.orchestrator.config import choose_devices, configure
from solbench.serve.auth import TOKEN_ENV, bind_refusal, read_token
from solbench.spec.errors import SpecError

DEFAULT_PORT = 8470
EXIT_BAD_INPUT = 2


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve verdicts over HTTP with warm workers (for agents and CI farms; docs/agents.md)",
        description="One long-lived process that owns this host's devices: a queue, warm workers per device, "
                    "the reference's timings reused across candidates. Clients: `solbench submit` and "
                    "solbench.api.Client.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; anything else needs a token)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto, every visible GPU)")
    p.add_argument("--devices", help="comma-separated CUDA device indices to serve (default: all visible)")
    p.add_argument("--token-file", help=f"a file whose first line is the token clients must send (-: stdin; "
                                        f"default: ${TOKEN_ENV}; required beyond localhost)")
    p.add_argument("--token", help="deprecated: the token on the command line, readable by every process of the "
                                   "host; use --token-file or $" + TOKEN_ENV)
    p.add_argument("--folder", type=Path, default=Path(".solbench/serve"),
                   help="the service's own folder: submissions' traces, problems sent by content, the reference's "
                        "timings (default .solbench/serve)")
    p.add_argument("--lock-clocks", action="store_true", help="lock each GPU's clocks while serving; needs root")
    p.add_argument("--reuse-eager-reference", action=argparse.BooleanOptionalAction, default=True,
                   help="time a problem's eager reference once per workload, GPU, clocks, torch and timing settings "
                        "and reuse its samples for later candidates (default); --no-reuse-eager-reference times it "
                        "interleaved with every candidate, so that drift between the two measurements cancels, at "
                        "about one reference block per round more per verdict (docs/agents.md)")
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    try:
        token = read_token(args.token, args.token_file, warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    refusal = bind_refusal(args.host, token)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not 0 <= args.port < 65536:
        print(f"error: --port {args.port} is not a port", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        config = configure(device=args.device, lock_clocks=args.lock_clocks)
        devices = choose_devices(config, args.devices)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        import aiohttp  # noqa: F401 - inner: the `serve` extra, checked before any worker starts
    except ImportError:
        print("error: solbench serve needs aiohttp: pip install 'solbench[serve]'", file=sys.stderr)
        return EXIT_BAD_INPUT
    from solbench.serve.service import Service, serve  # inner: starts workers, imports torch

    if args.folder == Path(".solbench/serve"):  # the default: .solbench/ git-ignores itself (report/workdir.py)
        from solbench.report.workdir import solbench_folder

        solbench_folder()
    try:
        service = Service(config, devices, args.folder, token, args.reuse_eager_reference)
    except (SpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        signum = serve(service, args.host, args.port)
    except OSError as exc:  # the port is taken, the address is not this host's
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 128 + signum  # stopped by SIGINT or SIGTERM, as every command: 130 or 143
