"""Start a Monarch host process: the program a user runs on each host of a multi-host run.

    python -m forge_agent.hosts.serve --address tcp://HOST:PORT

`HOST` must be the name or address the controller (and the other hosts) reach this machine
by; the placement config lists the same `tcp://HOST:PORT` strings (see docs/hosts.md). The
worker waits for a controller to attach (Monarch's `attach_to_workers`), runs the procs and
actors it is asked to, and kills them when that controller disconnects, then waits for the
next controller. A controller that shuts the host mesh down ends the worker process.
`--bind tcp://0.0.0.0:PORT` listens on another interface than the advertised one (e.g. behind
port forwarding).
"""

from __future__ import annotations

import argparse
import re
import sys

_ADDRESS = re.compile(r"^tcp://(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d{1,5})$")


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of a `tcp://HOST:PORT` worker address; ValueError naming it otherwise."""
    m = _ADDRESS.match(address)
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(
            f"worker address {address!r} is not tcp://HOST:PORT (HOST a name or IP address "
            "the controller can reach, not '*'; PORT 1-65535)"
        )
    return m["host"].strip("[]"), int(m["port"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forge_agent.hosts.serve", description=__doc__)
    parser.add_argument("--address", required=True, help="tcp://HOST:PORT other hosts dial")
    parser.add_argument("--bind", default=None, help="tcp://IP:PORT to listen on instead")
    args = parser.parse_args(argv)
    try:
        parse_address(args.address)
        if args.bind is not None:
            parse_address(args.bind)
    except ValueError as e:
        parser.error(str(e))

    from monarch.actor import start_worker_loop_forever

    address = args.address if args.bind is None else f"{args.address}@{args.bind}"
    lifetime = start_worker_loop_forever(address=address, ca="trust_all_connections")
    print(f"forge-agent worker ready on {args.address}", flush=True)
    lifetime.get()
    return 0


if __name__ == "__main__":
    sys.exit(main())
