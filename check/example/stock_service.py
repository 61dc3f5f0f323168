#!/usr/bin/env python3
"""A stock service written without seckill's code, for `seckill-check` to judge.

Python's standard library only. One product's stock in memory, sold over HTTP:

  POST /reset   {"product": "p1", "stock": 100, "limit": 1}   -> 200
  POST /buy?product=p1&user=u7   (Idempotency-Key: k)        -> 200 {"order": "..."}
                                  409 sold out, 403 past the buyer's limit
  GET  /stock?product=p1                                      -> 200 {"remaining": n}
  GET  /orders/<order>                                        -> 200, or 404

`--racy` (the default) reads the stock, then writes it back one lower: the read-then-write
race of the naive flash sale (two buyers read 5, both write 4, two units sold and one
taken). It waits, between the read and the write, for another buyer to have read too (up
to half a second), so that the race happens whenever two buyers are in at once, on any
machine. It checks a key and a buyer's limit before the read, the same way.
`--fixed` does the same under one lock, so the read and the write are one step.
`--receipt N` answers a sale with N bytes of receipt beside its order id, as a service
that answers with its whole order document does.

  python3 check/example/stock_service.py --port 9090 --racy
"""

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Shop:
    def __init__(self, racy, receipt=0):
        self.racy = racy
        self.receipt = "r" * receipt
        self.lock = threading.Lock()
        # Two buyers meet between their read and their write: the race, made certain.
        self.partner = threading.Barrier(2, timeout=0.5)
        self.reset("p1", 0, 0)

    def reset(self, product, stock, limit):
        with self.lock:
            self.product, self.stock, self.limit = product, stock, limit
            self.orders = {}  # order -> user
            self.bought = {}  # user -> units
            self.keys = {}  # idempotency key -> order

    def buy(self, user, key):
        """(status, body) of one purchase."""
        if self.racy:
            return self._buy(user, key)
        with self.lock:
            return self._buy(user, key)

    def _buy(self, user, key):
        if key is not None and key in self.keys:
            return 200, {"order": self.keys[key], "replayed": True}
        if self.limit and self.bought.get(user, 0) >= self.limit:
            return 403, {"outcome": "limit_reached"}
        left = self.stock
        if left <= 0:
            return 409, {"outcome": "sold_out"}
        if self.racy:
            # The race: another buyer reads the same stock before this one writes it.
            try:
                self.partner.wait()
            except threading.BrokenBarrierError:
                self.partner.reset()  # a buyer alone: on with the write
        self.stock = left - 1
        order = str(uuid.uuid4())
        self.orders[order] = user
        self.bought[user] = self.bought.get(user, 0) + 1
        if key is not None:
            self.keys[key] = order
        if self.receipt:
            return 200, {"receipt": self.receipt, "order": order}
        return 200, {"order": order}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (its timeout): its answer is unknown to it

    def do_POST(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        shop = self.server.shop
        if url.path == "/reset":
            try:
                body = json.loads(raw)
                shop.reset(str(body["product"]), int(body["stock"]), int(body.get("limit", 0)))
            except (ValueError, KeyError, TypeError) as err:
                return self.answer(400, {"error": str(err)})
            return self.answer(200, {"outcome": "reset"})
        if url.path == "/buy":
            if query.get("product", [None])[0] != shop.product:
                return self.answer(404, {"error": "unknown product"})
            user = query.get("user", ["anonymous"])[0]
            return self.answer(*shop.buy(user, self.headers.get("idempotency-key")))
        self.answer(404, {"error": "no such route"})

    def do_GET(self):
        url = urlparse(self.path)
        shop = self.server.shop
        if url.path == "/stock":
            return self.answer(200, {"product": shop.product, "remaining": shop.stock})
        if url.path.startswith("/orders/"):
            order = url.path[len("/orders/"):]
            if order in shop.orders:
                return self.answer(200, {"order": order, "user": shop.orders[order]})
            return self.answer(404, {"error": "no such order"})
        self.answer(404, {"error": "no such route"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9090, help="0: any free port (printed)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--racy", action="store_true", help="read, then write (the default)")
    mode.add_argument("--fixed", action="store_true", help="read and write under one lock")
    parser.add_argument("--receipt", type=int, default=0, help="bytes of receipt in a sale's answer")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.shop = Shop(racy=not args.fixed, receipt=args.receipt)
    port = server.server_address[1]
    print(f"listening on 127.0.0.1:{port} ({'fixed' if args.fixed else 'racy'})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
