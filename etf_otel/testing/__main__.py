"""``python -m etf_otel.testing``: the scripted LLM server, to try an integration without an API key.

It binds 127.0.0.1 only, prints one base URL per protocol and serves until Ctrl-C. By default
every streaming request gets two tool calls, and the follow-up carrying their results a text
answer; ``--quirk NAME`` serves a named stream of the quirks tables instead to a request that
carries no tool result (``--list`` names them), and still answers the follow-up with text, so an
agent loop ends.
This is the one module of the testing package that prints: it is a command.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence

from etf_otel.protocols import BEDROCK_CONVERSE, GEMINI, OLLAMA
from etf_otel.testing._quirks import QUIRK_TABLES
from etf_otel.testing._scripted import (
    BEDROCK_PATH,
    GEMINI_PATH,
    PATHS,
    quirk_protocols,
    quirk_responder,
    tool_turn_responder,
)
from etf_otel.testing._server import LocalChatServer

__all__ = ["main"]


def _port(text: str) -> int | None:
    """A TCP port, 0 to 65535, else ``None``."""
    try:
        port = int(text)
    except ValueError:
        return None
    return port if 0 <= port <= 65535 else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m etf_otel.testing",
        description="Serve scripted LLM streams (Chat Completions, Responses, Anthropic, Gemini) on 127.0.0.1.",
    )
    parser.add_argument("--port", default="8000", help="TCP port on 127.0.0.1, 0 to 65535 (default 8000; 0: any free)")
    parser.add_argument(
        "--quirk",
        metavar="NAME",
        help="serve the quirk stream NAME (see --list) to every request without tool results;"
        " the follow-up with results gets the text answer",
    )
    parser.add_argument("--list", action="store_true", help="list the quirk stream names per protocol and exit")
    return parser


def _list() -> None:
    for protocol, table in QUIRK_TABLES.items():
        print(f"{protocol}:")
        for name in table:
            print(f"  {name}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        _list()
        return 0
    try:
        responder = tool_turn_responder if args.quirk is None else quirk_responder(args.quirk)
    except KeyError:
        parser.error(f"no quirk stream named {args.quirk!r}; --list names them")
    port = _port(args.port)
    if port is None:
        parser.exit(2, f"{parser.prog}: --port takes a TCP port, 0 to 65535, not {args.port!r}\n")
    try:
        server = LocalChatServer(port=port, responder=responder)
    except OSError as error:
        parser.exit(2, f"{parser.prog}: cannot listen on 127.0.0.1:{port}: {error.strerror or error}\n")
    try:  # Ctrl-C may come at any moment, even before the first line is out
        with server:
            what = (
                "two tool calls, then a text answer"
                if args.quirk is None
                else f"the quirk stream {args.quirk!r}, then a text answer to the tool results"
            )
            print(f"scripted LLM server on 127.0.0.1:{server.port}, serving {what}; Ctrl-C stops it", flush=True)
            served = None if args.quirk is None else set(quirk_protocols(args.quirk))
            for path, protocol in PATHS.items():
                if (served is None or protocol in served) and protocol != OLLAMA.name:
                    base = server.root_url if path == "/v1/messages" else server.base_url
                    print(f"{protocol:<20} base_url={base}  (POST {path})", flush=True)
            if served is None or GEMINI.name in served:
                gemini = f"base_url={server.root_url}, api_version=v1beta"
                print(f"{GEMINI.name:<20} {gemini}  (POST {GEMINI_PATH})", flush=True)
            if served is None or BEDROCK_CONVERSE.name in served:
                endpoint = f"endpoint_url={server.root_url}"
                print(f"{BEDROCK_CONVERSE.name:<20} {endpoint}  (POST {BEDROCK_PATH})", flush=True)
            if served is None or OLLAMA.name in served:
                print(f"{OLLAMA.name:<20} host={server.root_url}  (POST /api/chat)", flush=True)
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
