"""Command line: `gpu-pool-scaler serve|explain|demo|research`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from scaler.config import ConfigError, load_config
from scaler.ingest.kube import NoKubeAPI
from scaler.logs import setup_logging
from scaler.research.cli import add_subcommands as add_research_subcommands

log = logging.getLogger("scaler.cli")


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="pool configuration file (YAML)")
    p.add_argument("--log-format", choices=("auto", "json", "text"), default="auto")
    p.add_argument("--log-level", default="INFO")


def _cmd_serve(args: argparse.Namespace) -> int:
    from scaler.app import Options, serve

    cfg = load_config(args.config)
    opts = Options(
        args.config,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        host=args.listen_address,
    )
    return asyncio.run(serve(cfg, opts))


def _cmd_explain(args: argparse.Namespace) -> int:
    from scaler.app import Options, Scaler
    from scaler.explain import render

    cfg = load_config(args.config)

    async def once() -> str:
        # One cycle: scraping in this process (no worker to spawn for it).
        # It reads the server's saved memory (server.stateFile / stateConfigMap), so the
        # decision shows the stabilization window and what was learned; it never writes it.
        scaler = Scaler(cfg, Options(args.config, scrape_in_worker=False, write_state=False))
        try:
            decision = await scaler.loop.run_once()
        finally:
            await scaler.close()
        return render(decision)

    print(asyncio.run(once()))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        from scaler.demo import main as demo_main
    except ImportError as e:  # the simulator's libraries are an extra, not the server's
        print(
            f"gpu-pool-scaler demo needs the simulator extra ({e.name} is missing): "
            "pip install 'gpu-pool-scaler[sim]'",
            file=sys.stderr,
        )
        return 2

    return demo_main(args.demo_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-pool-scaler",
        description="KEDA external scaler: vLLM replica targets and research GPU headroom.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the KEDA external scaler (gRPC + metrics)")
    _add_config(serve)
    serve.add_argument("--grpc-port", type=int, help="override server.grpcPort")
    serve.add_argument("--metrics-port", type=int, help="override server.metricsPort")
    serve.add_argument("--listen-address", help="override server.listenAddress (e.g. ::)")
    serve.set_defaults(func=_cmd_serve)
    explain = sub.add_parser("explain", help="scrape once; print each decision and the pool split")
    _add_config(explain)
    explain.set_defaults(func=_cmd_explain)
    demo = sub.add_parser(
        "demo",
        help="simulated pool on loopback + the real scaler (what `make run` runs)",
        add_help=False,
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    demo.set_defaults(func=_cmd_demo, log_format="text", log_level="INFO")
    research = sub.add_parser(
        "research", help="research work queue: submit, status, cancel, classes (Redis)"
    )
    add_research_subcommands(research.add_subparsers(dest="research_command", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "demo":
        # argparse's REMAINDER does not take a leading `--flag`: it lands in `extra`.
        args.demo_args = [*extra, *args.demo_args]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    setup_logging(args.log_format, args.log_level)
    try:
        return int(args.func(args))
    except ConfigError as e:
        print(f"error: invalid configuration: {e}", file=sys.stderr)
        return 2
    except NoKubeAPI as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
