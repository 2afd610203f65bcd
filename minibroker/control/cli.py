"""`minibroker control --control-url URL VERB ...`: the control endpoint (minibroker.control.http)
from a shell. Prints the answer (a table, or JSON with --json); exits 1 naming the verb, API or
broker at fault when the control cannot be done, 2 on bad arguments."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

EPILOG = """\
verbs:
  brokers                                   list the brokers (node id, address, running)
  stop N [--kill]                           stop broker N (cleanly; --kill: as kill -9)
  start N                                   start broker N again on its port
  move-leader TOPIC PARTITION BROKER        make BROKER lead TOPIC-PARTITION
  shuffle-leaders                           move every partition's leadership
  move-coordinator (--group G | --transactional-id T) BROKER
  errors push API CODE[,CODE...] [--broker N] [--topic T] [--partition P] [--group G] [--client-id C]
  errors clear                              drop every pushed stack
  errors list                               the stacks not used up yet
  delay BROKER MS                           hold BROKER's requests MS (0 ends it)
  requests [--api NAME] [--broker N] [--client-id C] [--json]
  connections close [--broker N]            close client connections (they reconnect)
  connections drop API [--count N] [--close] [--broker N] [--client-id C]
                                            the next requests handled but never answered
  clock advance SECONDS                     move every broker's clock forward

API names are Kafka's (Produce, JoinGroup) or keys; codes numbers or Kafka's names.

examples:
  minibroker serve --control-listen 127.0.0.1:9644
  minibroker control --control-url http://127.0.0.1:9644 errors push Produce NOT_LEADER_OR_FOLLOWER,6
  minibroker control --control-url http://127.0.0.1:9644 requests --api JoinGroup --json
  minibroker control --control-url http://127.0.0.1:9644 clock advance 86400
"""


class ControlFailed(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control-url", metavar="URL", required=True,
                        help="the endpoint of `minibroker serve --control-listen` (http://HOST:PORT)")
    parser.add_argument("--json", action="store_true", help="print the endpoint's JSON answer")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("brokers", help="list the brokers")
    stop = verbs.add_parser("stop", help="stop a broker")
    stop.add_argument("node_id", type=int, metavar="N")
    stop.add_argument("--kill", action="store_true", help="as kill -9 (no clean shutdown)")
    start = verbs.add_parser("start", help="start a stopped broker again")
    start.add_argument("node_id", type=int, metavar="N")
    move = verbs.add_parser("move-leader", help="move one partition's leader")
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument("broker", type=int)
    verbs.add_parser("shuffle-leaders", help="move every partition's leader")
    coordinator = verbs.add_parser("move-coordinator", help="move a group's or transactional id's coordinator")
    which = coordinator.add_mutually_exclusive_group(required=True)
    which.add_argument("--group")
    which.add_argument("--transactional-id")
    coordinator.add_argument("broker", type=int)
    errors = verbs.add_parser("errors", help="push or clear error stacks")
    actions = errors.add_subparsers(dest="action", metavar="ACTION", required=True)
    push = actions.add_parser("push", help="answer the next matching requests with these codes")
    push.add_argument("api", help="Kafka's API name (Produce, JoinGroup) or key")
    push.add_argument("codes", help="CODE[,CODE...]: numbers or Kafka's names")
    push.add_argument("--broker", type=int)
    push.add_argument("--topic")
    push.add_argument("--partition", type=int)
    push.add_argument("--group")
    push.add_argument("--client-id")
    actions.add_parser("clear", help="drop every stack")
    actions.add_parser("list", help="the stacks not used up yet")
    delay = verbs.add_parser("delay", help="a round-trip delay on one broker")
    delay.add_argument("broker", type=int)
    delay.add_argument("ms", type=int)
    requests = verbs.add_parser("requests", help="the captured requests")
    requests.add_argument("--api")
    requests.add_argument("--broker", type=int)
    requests.add_argument("--client-id")
    requests.add_argument("--json", action="store_true", dest="json_here", help="print JSON")
    connections = verbs.add_parser("connections", help="close client connections")
    connections.add_argument("action", choices=["close", "drop"])
    connections.add_argument("api", nargs="?", help="drop: the API whose next requests go unanswered")
    connections.add_argument("--broker", type=int)
    connections.add_argument("--count", type=int, default=1, help="drop: how many requests (default 1)")
    connections.add_argument("--close", action="store_true", help="drop: close the connection instead")
    connections.add_argument("--client-id", dest="drop_client_id")
    clock = verbs.add_parser("clock", help="move the brokers' clocks")
    clock.add_argument("action", choices=["advance"])
    clock.add_argument("seconds", type=float)


def call(url: str, method: str, path: str, body: dict[str, Any] | None = None,
         query: dict[str, Any] | None = None) -> Any:
    """One control over HTTP: the JSON answer; ControlFailed with the endpoint's message."""
    target = url.rstrip("/") + path
    if query:
        target += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(target, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise ControlFailed(message) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ControlFailed(f"cannot reach the control endpoint {url}: {reason}") from None


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]:
    verb = args.verb
    if verb == "brokers":
        return "GET", "/brokers", None, None
    if verb in ("stop", "start"):
        return "POST", f"/brokers/{args.node_id}/{verb}", {"kill": args.kill} if verb == "stop" else {}, None
    if verb == "move-leader":
        return "POST", "/move-leader", {"topic": args.topic, "partition": args.partition, "broker": args.broker}, None
    if verb == "shuffle-leaders":
        return "POST", "/shuffle-leaders", {}, None
    if verb == "move-coordinator":
        body: dict[str, Any] = {"broker": args.broker}
        body["group" if args.group is not None else "transactional_id"] = args.group or args.transactional_id
        return "POST", "/move-coordinator", body, None
    if verb == "errors":
        if args.action == "push":
            body = {"api": args.api, "codes": [c.strip() for c in args.codes.split(",") if c.strip()],
                    "broker": args.broker, "topic": args.topic, "partition": args.partition, "group": args.group,
                    "client_id": args.client_id}
            return "POST", "/errors", {k: v for k, v in body.items() if v is not None}, None
        return ("DELETE" if args.action == "clear" else "GET"), "/errors", None, None
    if verb == "delay":
        return "POST", "/delay", {"broker": args.broker, "ms": args.ms}, None
    if verb == "requests":
        return "GET", "/requests", None, {"api": args.api, "broker": args.broker, "client_id": args.client_id}
    if verb == "connections" and args.action == "drop":
        if not args.api:
            raise SystemExit("minibroker control connections drop: name the API (e.g. Produce)")
        body = {"api": args.api, "count": args.count, "close": args.close, "broker": args.broker,
                "client_id": args.drop_client_id}
        return "POST", "/connections/drop", {k: v for k, v in body.items() if v is not None}, None
    if verb == "connections":
        return "POST", "/connections/close", {} if args.broker is None else {"broker": args.broker}, None
    return "POST", "/clock/advance", {"seconds": args.seconds}, None


def _print(args: argparse.Namespace, answer: Any) -> None:
    if args.json or getattr(args, "json_here", False):
        print(json.dumps(answer, indent=2))
        return
    if "brokers" in answer:
        print("NODE\tADDRESS\tRUNNING")
        for b in answer["brokers"]:
            print(f"{b['node_id']}\t{b['host']}:{b['port']}\t{'yes' if b['running'] else 'no'}")
    elif "requests" in answer:
        for r in answer["requests"]:
            print(f"broker {r['broker']}\t{r['api']} v{r['version']}\tclient {r['client_id']!r}\t"
                  f"correlation {r['correlation_id']}")
    elif "stacks" in answer:
        for s in answer["stacks"]:
            print(json.dumps(s))
    elif "pushed" in answer:
        s = answer["pushed"]
        print(f"pushed {s['api']} {','.join(map(str, s['codes']))}")
    elif "closed" in answer:
        print(f"closed {answer['closed']} connection(s)")
    else:
        print("ok")


def run(args: argparse.Namespace) -> int:
    method, path, body, query = _request(args)
    try:
        answer = call(args.control_url, method, path, body, query)
    except ControlFailed as exc:
        print(f"minibroker control {args.verb}: {exc}", file=sys.stderr)
        return 1
    _print(args, answer)
    return 0
