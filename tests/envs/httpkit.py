"""A local HTTP API standing in for a real one (a tiny shop: product lookup, search and
orders, whose order ids count up, as a live server's do), and its ToolAlpaca record (an
OpenAPI 3.0 document), for the tests of HTTP tools; not part of the package."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

PRODUCTS = {
    "P1": {"product_id": "P1", "name": "red kettle", "price": 25.0},
    "P2": {"product_id": "P2", "name": "blue teapot", "price": 18.5},
    "P3": {"product_id": "P3", "name": "steel kettle", "price": 40.0},
}

OPENAPI = {
    "openapi": "3.0.0",
    "info": {"title": "Shop", "version": "1"},
    "servers": [{"url": "http://shop.example.test/api"}],
    "paths": {
        "/products/{product_id}": {
            "get": {
                "operationId": "get_product",
                "summary": "Look up a product by its id.",
                "parameters": [
                    {"name": "product_id", "in": "path", "required": True,
                     "schema": {"type": "string"}, "description": "The product id."}
                ],
                "responses": {"200": {"description": "The product.", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "product_id": {"type": "string"}, "name": {"type": "string"},
                        "price": {"type": "number"}}}}}}},
            }
        },
        "/products": {
            "get": {
                "operationId": "search_products",
                "summary": "Search products by a word of their name.",
                "parameters": [
                    {"name": "query", "in": "query", "required": True,
                     "schema": {"type": "string"}, "description": "A word to look for."}
                ],
                "responses": {"200": {"description": "Matches.", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "results": {"type": "array", "items": {"type": "object", "properties": {
                            "product_id": {"type": "string"}, "name": {"type": "string"}}}}}}}}}},
            }
        },
        "/orders": {
            "post": {
                "operationId": "create_order",
                "summary": "Order a quantity of a product.",
                "requestBody": {"content": {"application/json": {"schema": {
                    "type": "object", "required": ["product_id", "quantity"], "properties": {
                        "product_id": {"type": "string", "description": "The product id."},
                        "quantity": {"type": "integer", "description": "How many."}}}}}},
                "responses": {"200": {"description": "The order.", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "order_id": {"type": "string"}, "total": {"type": "number"}}}}}}},
            }
        },
    },
}  # fmt: skip


def write_toolalpaca(path: Path, server: str | None = None) -> Path:
    """The shop as a ToolAlpaca record file (``server`` replaces the documented one)."""
    doc = dict(OPENAPI)
    if server is not None:
        doc["servers"] = [{"url": server}]
    record = {
        "Name": "Shop",
        "Description": "A small shop API.",
        "Category": "Shopping",
        "Documentation": json.dumps(doc),
        "Function_Projection": {
            "get_product": ["/products/{product_id}", "GET"],
            "search_products": ["/products", "GET"],
            "create_order": ["/orders", "POST"],
        },
    }
    path.write_text(json.dumps([record]))
    return path


class ShopServer:
    """The shop on 127.0.0.1 (a free port); ``hits`` counts the requests it answered."""

    def __init__(self) -> None:
        self.hits = 0
        self.orders = 0
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                shop.hits += 1
                url = urlsplit(self.path)
                m = re.fullmatch(r"/api/products/([^/]+)", url.path)
                if m:
                    p = PRODUCTS.get(m.group(1))
                    self._send(200 if p else 404, p or {"error": "no such product"})
                elif url.path == "/api/products":
                    q = (parse_qs(url.query).get("query") or [""])[0].lower()
                    hits = [{"product_id": k, "name": v["name"]} for k, v in PRODUCTS.items()
                            if q and q in v["name"]]  # fmt: skip
                    self._send(200, {"results": hits})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                shop.hits += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                p = PRODUCTS.get(body.get("product_id"))
                if self.path != "/api/orders" or p is None:
                    self._send(404, {"error": "no such product"})
                    return
                shop.orders += 1
                total = p["price"] * int(body.get("quantity", 1))
                self._send(200, {"order_id": f"O-{shop.orders}", "total": total})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ShopServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
