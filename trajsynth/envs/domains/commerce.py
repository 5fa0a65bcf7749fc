"""Commerce: customers, products with variants, orders, cancellations, returns and exchanges.

Modelled on tau-bench's retail domain (Yao et al. 2024, arXiv:2406.12045): an agent
identifies the customer, looks up orders and products, and changes orders within the rules.
State tables: ``users`` (address, payment methods), ``products`` (variants keyed by item id,
each with options, price and stock), ``orders`` (status pending → processed → delivered;
items) and ``categories``. A fixed core of customers, products and orders is the same for
every seed; the seed adds customers and orders.

Rules (and their failures): only a *pending* order can be cancelled or have its address or
items changed; only a *delivered* order can have items returned or exchanged (``conflict``
otherwise); an exchange or modification must swap an item for a variant of the same product
that is in stock (``invalid_value`` / ``unavailable``); refunds go to the original payment or
a gift card of the customer; unknown users, orders, items and payment methods are
``not_found``.

Data flow: find_user_by_email / find_user_by_name_zip → user_id → get_customer → order_ids,
payment_id → get_order → items[].item_id, product_id → get_product → variants[].item_id →
exchange_items.new_item_ids; search_products → product_id.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict, cast

from ..domain import Domain
from ..state import State
from ..tasks import call, ref, task, turn
from ..tools import ToolError, tool
from ._common import get_or_fail, money, rng_for

CATEGORIES = ["footwear", "electronics", "home", "outdoor", "apparel"]


def _variant(item_id: str, options: dict, price: float, available: bool) -> dict:
    return {"item_id": item_id, "options": options, "price": price, "available": available}


CORE_PRODUCTS = {
    "P-RUNSHOE": ("Trail running shoe", "footwear", [
        _variant("I-1001", {"size": "9", "color": "black"}, 120.0, True),
        _variant("I-1002", {"size": "10", "color": "black"}, 120.0, True),
        _variant("I-1003", {"size": "10", "color": "red"}, 125.0, False),
        _variant("I-1004", {"size": "11", "color": "black"}, 120.0, True),
    ]),
    "P-HEADPHN": ("Wireless headphones", "electronics", [
        _variant("I-2001", {"color": "white"}, 199.0, True),
        _variant("I-2002", {"color": "black"}, 189.0, True),
    ]),
    "P-LAMP": ("Desk lamp", "home", [
        _variant("I-3001", {"finish": "brass"}, 45.5, True),
        _variant("I-3002", {"finish": "matte black"}, 42.0, True),
    ]),
    "P-TENT": ("Two-person tent", "outdoor", [
        _variant("I-4001", {"color": "green"}, 240.0, False),
        _variant("I-4002", {"color": "orange"}, 230.0, True),
    ]),
    "P-JACKET": ("Rain jacket", "apparel", [
        _variant("I-5001", {"size": "M", "color": "navy"}, 89.0, True),
        _variant("I-5002", {"size": "L", "color": "navy"}, 89.0, True),
    ]),
}  # fmt: skip
CORE_USERS = [
    ("u_sara_lee", "Sara", "Lee", "sara.lee@shop.test", "94110",
     {"address1": "12 Valencia St", "address2": "", "city": "San Francisco", "state": "CA",
      "zip": "94110", "country": "USA"},
     [{"payment_id": "pm_sara_card", "kind": "credit_card", "balance": None},
      {"payment_id": "pm_sara_gift", "kind": "gift_card", "balance": 30.0}]),
    ("u_jon_park", "Jon", "Park", "jon.park@shop.test", "10001",
     {"address1": "400 W 33rd St", "address2": "Apt 9", "city": "New York", "state": "NY",
      "zip": "10001", "country": "USA"},
     [{"payment_id": "pm_jon_paypal", "kind": "paypal", "balance": None}]),
]  # fmt: skip
CORE_ORDERS = [
    ("#W1001", "u_sara_lee", "delivered", [("P-RUNSHOE", "I-1002"), ("P-LAMP", "I-3001")],
     "pm_sara_card"),
    ("#W1002", "u_sara_lee", "pending", [("P-HEADPHN", "I-2001")], "pm_sara_card"),
    ("#W1003", "u_jon_park", "processed", [("P-JACKET", "I-5001")], "pm_jon_paypal"),
    ("#W1004", "u_jon_park", "pending", [("P-TENT", "I-4002"), ("P-LAMP", "I-3002")],
     "pm_jon_paypal"),
]  # fmt: skip
_FIRST = ["Ava", "Leo", "Mila", "Noah", "Omi", "Pia", "Quin", "Rosa", "Sven", "Tara"]
_LAST = ["Diaz", "Evans", "Fox", "Gray", "Hall", "Ibsen", "Jones", "Khan"]


def _items(products: dict, pairs: list) -> list[dict]:
    out = []
    for pid, iid in pairs:
        v = next(v for v in products[pid]["variants"] if v["item_id"] == iid)
        out.append(
            {
                "item_id": iid,
                "product_id": pid,
                "name": products[pid]["name"],
                "price": v["price"],
                "options": dict(v["options"]),
            }
        )
    return out


def build_state(seed: int) -> dict[str, dict]:
    rng = rng_for("commerce", seed)
    products: dict[str, dict[str, Any]] = {
        pid: {"product_id": pid, "name": n, "category": c, "variants": vs}
        for pid, (n, c, vs) in CORE_PRODUCTS.items()
    }
    users: dict[str, dict[str, Any]] = {}
    for uid, first, last, email, zip_, addr, pms in CORE_USERS:
        users[uid] = {
            "user_id": uid,
            "first_name": first,
            "last_name": last,
            "email": email,
            "zip": zip_,
            "address": addr,
            "payment_methods": pms,
        }
    orders: dict[str, dict[str, Any]] = {}
    for oid, uid, status, pairs, pm in CORE_ORDERS:
        items = _items(products, pairs)
        orders[oid] = {
            "order_id": oid,
            "user_id": uid,
            "status": status,
            "items": items,
            "address": dict(users[uid]["address"]),
            "payment_id": pm,
            "total": money(sum(i["price"] for i in items)),
        }
    cities = [("Austin", "TX", "73301"), ("Denver", "CO", "80202"), ("Miami", "FL", "33101")]
    for i in range(30):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        uid = f"u_{first.lower()}_{last.lower()}_{i}"
        city, st, zip_ = rng.choice(cities)
        users[uid] = {
            "user_id": uid,
            "first_name": first,
            "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{i}@shop.test",
            "zip": zip_,
            "address": {
                "address1": f"{rng.randint(1, 999)} Main St",
                "address2": "",
                "city": city,
                "state": st,
                "zip": zip_,
                "country": "USA",
            },
            "payment_methods": [
                {"payment_id": f"pm_{uid}", "kind": "credit_card", "balance": None}
            ],
        }
        for k in range(rng.randint(0, 3)):
            pid = rng.choice(sorted(products))
            v = rng.choice(products[pid]["variants"])
            items = _items(products, [(pid, v["item_id"])])
            oid = f"#W{2000 + i * 4 + k}"
            orders[oid] = {
                "order_id": oid,
                "user_id": uid,
                "status": rng.choice(["pending", "processed", "delivered"]),
                "items": items,
                "address": dict(users[uid]["address"]),
                "payment_id": f"pm_{uid}",
                "total": items[0]["price"],
            }
    return {
        "users": users,
        "products": products,
        "orders": orders,
        "categories": {c: {"name": c} for c in CATEGORIES},
    }


# --------------------------------------------------------------------------------------
# response types
# --------------------------------------------------------------------------------------


class UserId(TypedDict):
    user_id: Annotated[str, "Customer id, e.g. 'u_sara_lee'; pass it to get_customer."]


class Address(TypedDict):
    address1: Annotated[str, "Street address."]
    address2: Annotated[str, "Apartment, suite (may be empty)."]
    city: Annotated[str, "City."]
    state: Annotated[str, "State code."]
    zip: Annotated[str, "ZIP code."]
    country: Annotated[str, "Country."]


class Payment(TypedDict):
    payment_id: Annotated[str, "Payment method id; pass it as payment_id for refunds/charges."]
    kind: Annotated[Literal["credit_card", "gift_card", "paypal"], "Kind of payment method."]
    balance: Annotated[float | None, "Gift card balance in USD, null otherwise."]


class Customer(TypedDict):
    user_id: Annotated[str, "Customer id."]
    first_name: Annotated[str, "First name."]
    last_name: Annotated[str, "Last name."]
    email: Annotated[str, "Email."]
    address: Annotated[Address, "Default shipping address."]
    payment_methods: Annotated[list[Payment], "Payment methods on file."]
    order_ids: Annotated[list[str], "The customer's order ids, e.g. '#W1001'."]


class OrderItem(TypedDict):
    item_id: Annotated[str, "Item (variant) id, e.g. 'I-1002'; pass it in item_ids."]
    product_id: Annotated[str, "Product id, e.g. 'P-RUNSHOE'; pass it to get_product."]
    name: Annotated[str, "Product name."]
    price: Annotated[float, "Price paid in USD."]
    options: Annotated[dict[str, str], "Variant options (size, color, ...)."]


class Order(TypedDict):
    order_id: Annotated[str, "Order id, e.g. '#W1001'."]
    user_id: Annotated[str, "Customer id."]
    status: Annotated[
        Literal[
            "pending",
            "processed",
            "delivered",
            "cancelled",
            "return_requested",
            "exchange_requested",
        ],
        "Order status.",
    ]
    items: Annotated[list[OrderItem], "Items in the order."]
    address: Annotated[Address, "Shipping address."]
    payment_id: Annotated[str, "Payment method charged."]
    total: Annotated[float, "Order total in USD."]


class Variant(TypedDict):
    item_id: Annotated[str, "Item id of this variant; pass it in new_item_ids."]
    options: Annotated[dict[str, str], "Options of this variant."]
    price: Annotated[float, "Price in USD."]
    available: Annotated[bool, "In stock."]


class Product(TypedDict):
    product_id: Annotated[str, "Product id."]
    name: Annotated[str, "Product name."]
    category: Annotated[str, "Category."]
    variants: Annotated[list[Variant], "Every variant."]


class ProductSummary(TypedDict):
    product_id: Annotated[str, "Product id; pass it to get_product."]
    name: Annotated[str, "Product name."]
    category: Annotated[str, "Category."]
    min_price: Annotated[float, "Cheapest matching variant's price."]


class ProductSearch(TypedDict):
    products: Annotated[list[ProductSummary], "Matching products."]


class OrderChange(TypedDict):
    order_id: Annotated[str, "The changed order."]
    status: Annotated[str, "The order's status now."]
    amount_usd: Annotated[float, "Refund (positive) or charge (negative) in USD."]
    payment_id: Annotated[str | None, "Payment method refunded or charged."]


class CategoryCount(TypedDict):
    name: Annotated[str, "Category name; pass it to search_products."]
    product_count: Annotated[int, "Products in it."]


class Categories(TypedDict):
    categories: Annotated[list[CategoryCount], "Every category."]


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------


def _user_payment(user: dict, payment_id: str) -> dict:
    for pm in user["payment_methods"]:
        if pm["payment_id"] == payment_id:
            return pm
    raise ToolError("not_found", f"payment method {payment_id!r} not on file for {user['user_id']}")


def _order_status(order: dict, allowed: str, action: str) -> None:
    if order["status"] != allowed:
        raise ToolError(
            "conflict",
            f"order {order['order_id']} is {order['status']}; only {allowed} "
            f"orders can be {action}",
        )


def _order_items(order: dict, item_ids: list[str]) -> list[dict]:
    items = list(order["items"])
    picked = []
    for iid in item_ids:
        match = next((i for i in items if i["item_id"] == iid), None)
        if match is None:
            raise ToolError("not_found", f"item {iid} is not in order {order['order_id']}")
        items.remove(match)
        picked.append(match)
    return picked


def _refund_target(db: State, user: dict, order: dict, payment_id: str) -> dict:
    pm = _user_payment(user, payment_id)
    if payment_id != order["payment_id"] and pm["kind"] != "gift_card":
        raise ToolError(
            "invalid_value",
            "refunds go to the original payment method or a gift card of the customer",
        )
    return pm


def _credit(db: State, user: dict, payment_id: str, amount: float) -> None:
    """Add ``amount`` to a gift card's balance (other payment methods keep no balance)."""
    if not any(
        pm["payment_id"] == payment_id and pm["kind"] == "gift_card"
        for pm in user["payment_methods"]
    ):
        return
    methods = [
        {**pm, "balance": money(pm["balance"] + amount)}
        if pm["payment_id"] == payment_id and pm["kind"] == "gift_card"
        else pm
        for pm in user["payment_methods"]
    ]
    db.update("users", user["user_id"], payment_methods=methods)


def _swap(
    db: State, order: dict, item_ids: list[str], new_item_ids: list[str]
) -> tuple[list, float]:
    if len(item_ids) != len(new_item_ids) or not item_ids:
        raise ToolError("invalid_value", "item_ids and new_item_ids must pair up one to one")
    old = _order_items(order, item_ids)
    new_items = list(order["items"])
    diff = 0.0
    for item, new_id in zip(old, new_item_ids, strict=True):
        product = get_or_fail(db, "products", item["product_id"], "product")
        variant = next((v for v in product["variants"] if v["item_id"] == new_id), None)
        if variant is None:
            raise ToolError(
                "invalid_value",
                f"{new_id} is not a variant of {product['name']} ({item['product_id']})",
            )
        if new_id == item["item_id"]:
            raise ToolError("invalid_value", f"{new_id} is the item already in the order")
        if not variant["available"]:
            raise ToolError(
                "unavailable", f"{product['name']} {variant['options']} is out of stock"
            )
        diff += variant["price"] - item["price"]
        new_items[new_items.index(item)] = {
            **item,
            "item_id": new_id,
            "price": variant["price"],
            "options": dict(variant["options"]),
        }
    return new_items, money(diff)


@tool()
def find_user_by_email(db: State, email: Annotated[str, "The customer's email."]) -> UserId:
    """Find a customer id by email."""
    want = email.strip().lower()
    for uid, u in db.rows("users"):
        if u["email"].lower() == want:
            return {"user_id": uid}
    raise ToolError("not_found", f"no customer with email {email!r}")


@tool()
def find_user_by_name_zip(
    db: State,
    first_name: Annotated[str, "First name."],
    last_name: Annotated[str, "Last name."],
    zip: Annotated[str, "ZIP code of the default address."],
) -> UserId:
    """Find a customer id by name and ZIP code."""
    for uid, u in db.rows("users"):
        if (u["first_name"].lower(), u["last_name"].lower(), u["zip"]) == (
            first_name.strip().lower(),
            last_name.strip().lower(),
            zip.strip(),
        ):
            return {"user_id": uid}
    raise ToolError("not_found", f"no customer {first_name} {last_name} at ZIP {zip}")


@tool()
def get_customer(db: State, user_id: Annotated[str, "Customer id."]) -> Customer:
    """Get a customer's details, payment methods and order ids."""
    u = get_or_fail(db, "users", user_id, "customer")
    orders = sorted(oid for oid, o in db.rows("orders") if o["user_id"] == user_id)
    return {
        "user_id": user_id,
        "first_name": u["first_name"],
        "last_name": u["last_name"],
        "email": u["email"],
        "address": cast(Address, dict(u["address"])),
        "payment_methods": [cast(Payment, dict(pm)) for pm in u["payment_methods"]],
        "order_ids": orders,
    }


@tool()
def get_order(db: State, order_id: Annotated[str, "Order id, e.g. '#W1001'."]) -> Order:
    """Get an order's status, items, address and total."""
    o = get_or_fail(db, "orders", order_id, "order")
    return cast(Order, {**o, "items": [dict(i) for i in o["items"]], "address": dict(o["address"])})


@tool()
def get_product(db: State, product_id: Annotated[str, "Product id, e.g. 'P-RUNSHOE'."]) -> Product:
    """Get a product and all its variants with price and stock."""
    p = get_or_fail(db, "products", product_id, "product")
    return cast(Product, {**p, "variants": [dict(v) for v in p["variants"]]})


@tool()
def search_products(
    db: State,
    query: Annotated[str, "Words in the product name (case-insensitive)."] = "",
    category: Annotated[str | None, "Only this category (see list_categories)."] = None,
    max_price: Annotated[float | None, "Only variants at or below this price."] = None,
    in_stock_only: Annotated[bool, "Only variants in stock."] = True,
) -> ProductSearch:
    """Search the catalogue."""
    if category is not None and not db.has("categories", category):
        raise ToolError("not_found", f"no category {category!r}")
    words = query.lower().split()
    found: list[ProductSummary] = []
    for pid, p in sorted(db.rows("products")):
        if category and p["category"] != category:
            continue
        if any(w not in p["name"].lower() for w in words):
            continue
        prices = [
            v["price"]
            for v in p["variants"]
            if (not in_stock_only or v["available"])
            and (max_price is None or v["price"] <= max_price)
        ]
        if prices:
            found.append(
                {
                    "product_id": pid,
                    "name": p["name"],
                    "category": p["category"],
                    "min_price": min(prices),
                }
            )
    return {"products": found}


@tool(writes=True)
def cancel_order(
    db: State,
    order_id: Annotated[str, "Order id."],
    reason: Annotated[Literal["no longer needed", "ordered by mistake"], "Why."],
) -> OrderChange:
    """Cancel a pending order; the total is refunded to the original payment method."""
    o = get_or_fail(db, "orders", order_id, "order")
    _order_status(o, "pending", "cancelled")
    user = get_or_fail(db, "users", o["user_id"], "customer")
    _credit(db, user, o["payment_id"], o["total"])
    db.update("orders", order_id, status="cancelled", cancel_reason=reason)
    return {
        "order_id": order_id,
        "status": "cancelled",
        "amount_usd": o["total"],
        "payment_id": o["payment_id"],
    }


@tool(writes=True)
def return_items(
    db: State,
    order_id: Annotated[str, "Delivered order id."],
    item_ids: Annotated[list[str], "Item ids to return.", {"minItems": 1}],
    payment_id: Annotated[str, "Refund to: the original payment method or a gift card."],
) -> OrderChange:
    """Return items of a delivered order for a refund."""
    o = get_or_fail(db, "orders", order_id, "order")
    _order_status(o, "delivered", "returned")
    user = get_or_fail(db, "users", o["user_id"], "customer")
    items = _order_items(o, item_ids)
    _refund_target(db, user, o, payment_id)
    amount = money(sum(i["price"] for i in items))
    _credit(db, user, payment_id, amount)
    db.update(
        "orders",
        order_id,
        status="return_requested",
        return_items=sorted(item_ids),
        refund_payment_id=payment_id,
    )
    return {
        "order_id": order_id,
        "status": "return_requested",
        "amount_usd": amount,
        "payment_id": payment_id,
    }


@tool(writes=True)
def exchange_items(
    db: State,
    order_id: Annotated[str, "Delivered order id."],
    item_ids: Annotated[list[str], "Item ids to exchange.", {"minItems": 1}],
    new_item_ids: Annotated[list[str], "Replacement variants, same product, same order."],
    payment_id: Annotated[str, "Pays or receives the price difference."],
) -> OrderChange:
    """Exchange delivered items for other variants of the same products."""
    o = get_or_fail(db, "orders", order_id, "order")
    _order_status(o, "delivered", "exchanged")
    user = get_or_fail(db, "users", o["user_id"], "customer")
    new_items, diff = _swap(db, o, item_ids, new_item_ids)
    pm = _refund_target(db, user, o, payment_id)
    if diff > 0 and pm["kind"] == "gift_card" and pm["balance"] < diff:
        raise ToolError("limit_exceeded", f"gift card balance {pm['balance']} < {diff}")
    _credit(db, user, payment_id, -diff)
    db.update(
        "orders",
        order_id,
        status="exchange_requested",
        items=new_items,
        total=money(o["total"] + diff),
    )
    return {
        "order_id": order_id,
        "status": "exchange_requested",
        "amount_usd": -diff,
        "payment_id": payment_id,
    }


@tool(writes=True)
def modify_order_items(
    db: State,
    order_id: Annotated[str, "Pending order id."],
    item_ids: Annotated[list[str], "Item ids to change.", {"minItems": 1}],
    new_item_ids: Annotated[list[str], "Replacement variants of the same products."],
    payment_id: Annotated[str, "Pays or receives the price difference."],
) -> OrderChange:
    """Swap items of a pending order for other variants of the same products."""
    o = get_or_fail(db, "orders", order_id, "order")
    _order_status(o, "pending", "modified")
    user = get_or_fail(db, "users", o["user_id"], "customer")
    new_items, diff = _swap(db, o, item_ids, new_item_ids)
    _refund_target(db, user, o, payment_id)
    _credit(db, user, payment_id, -diff)
    db.update("orders", order_id, items=new_items, total=money(o["total"] + diff))
    return {
        "order_id": order_id,
        "status": "pending",
        "amount_usd": -diff,
        "payment_id": payment_id,
    }


@tool(writes=True)
def modify_order_address(
    db: State,
    order_id: Annotated[str, "Pending order id."],
    address1: Annotated[str, "Street address."],
    city: Annotated[str, "City."],
    state: Annotated[str, "State code, e.g. 'CA'."],
    zip: Annotated[str, "ZIP code.", {"pattern": "^[0-9]{5}$"}],
    address2: Annotated[str, "Apartment, suite."] = "",
    country: Annotated[str, "Country."] = "USA",
) -> Order:
    """Change the shipping address of a pending order."""
    o = get_or_fail(db, "orders", order_id, "order")
    _order_status(o, "pending", "modified")
    addr = {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "zip": zip,
        "country": country,
    }
    o = db.update("orders", order_id, address=addr)
    return cast(Order, {**o, "items": [dict(i) for i in o["items"]], "address": dict(addr)})


@tool()
def list_categories(db: State) -> Categories:
    """List the product categories."""
    counts = {c: 0 for c, _ in db.rows("categories")}
    for _, p in db.rows("products"):
        counts[p["category"]] = counts.get(p["category"], 0) + 1
    return {"categories": [{"name": c, "product_count": n} for c, n in sorted(counts.items())]}


TOOLS = [
    find_user_by_email,
    find_user_by_name_zip,
    get_customer,
    get_order,
    get_product,
    search_products,
    cancel_order,
    return_items,
    exchange_items,
    modify_order_items,
    modify_order_address,
    list_categories,
]


# fmt: off
def authored_tasks() -> list:
    return [
        task(
            "commerce-order-status",
            ["single_call"],
            turn("What's the status of order #W1003?", call("get_order", order_id="#W1003")),
            required_outputs=["processed"],
        ),
        task(
            "commerce-exchange-size",
            ["dependent_calls", "long_horizon"],
            turn(
                "Hi, I'm Sara Lee, ZIP 94110. The running shoes in my delivered order are too "
                "small; exchange them for size 11 in the same color, charge my card.",
                call("find_user_by_name_zip", first_name="Sara", last_name="Lee", zip="94110"),
                call("get_customer", user_id=ref("c0.user_id")),
                call("get_order", order_id=ref("c1.order_ids[0]")),
                call("get_product", product_id=ref("c2.items[0].product_id")),
                call(
                    "exchange_items",
                    order_id=ref("c2.order_id"),
                    item_ids=[ref("c2.items[0].item_id")],
                    new_item_ids=[ref("c3.variants[3].item_id")],
                    payment_id=ref("c1.payment_methods[0].payment_id"),
                ),
            ),
            required_outputs=["exchange"],
        ),
        task(
            "commerce-parallel-lookup",
            ["parallel_calls"],
            turn(
                "Give me the status of orders #W1002 and #W1004.",
                [call("get_order", order_id="#W1002"), call("get_order", order_id="#W1004")],
            ),
            required_outputs=["pending"],
        ),
        task(
            "commerce-cancel-wrong-status",
            ["error_recovery", "dependent_calls"],
            turn(
                "Cancel Jon Park's jacket order #W1003 (jon.park@shop.test), ordered by "
                "mistake. If it can't be cancelled, cancel his other pending order instead.",
                call(
                    "cancel_order",
                    order_id="#W1003",
                    reason="ordered by mistake",
                    expect_error="conflict",
                ),
                call("find_user_by_email", email="jon.park@shop.test"),
                call("get_customer", user_id=ref("c1.user_id")),
                call("cancel_order", order_id=ref("c2.order_ids[1]"), reason="ordered by mistake"),
            ),
            required_outputs=["#W1004"],
            note="#W1003 is processed (not cancellable); #W1004 is Jon's pending order.",
        ),
        task(
            "commerce-return-to-gift-card",
            ["dependent_calls", "multi_call"],
            turn(
                "Return the desk lamp from order #W1001 and put the refund on my gift card.",
                call("get_order", order_id="#W1001"),
                call("get_customer", user_id=ref("c0.user_id")),
                call(
                    "return_items",
                    order_id="#W1001",
                    item_ids=[ref("c0.items[1].item_id")],
                    payment_id=ref("c1.payment_methods[1].payment_id"),
                ),
            ),
            required_outputs=[ref("c2.amount_usd")],
        ),
        task(
            "commerce-clarify-address",
            ["needs_clarification", "optional_params"],
            turn(
                "Please ship my pending order #W1002 to my new address.",
                call(
                    "modify_order_address",
                    order_id="#W1002",
                    address1="500 Castro St",
                    city="San Francisco",
                    state="CA",
                    zip="94114",
                    address2="Unit 2",
                ),
                kind="clarify",
                answer="What is the new address?",
                clarification="500 Castro St, Unit 2, San Francisco, CA 94114.",
            ),
        ),
        task(
            "commerce-return-policy",
            ["no_tool_needed"],
            turn(
                "Can I return an order that hasn't been delivered yet?",
                kind="no_tool",
                answer="No: only delivered orders can be returned; a pending order can be "
                "cancelled instead.",
            ),
            required_outputs=["cancel"],
        ),
    ]
# fmt: on


DOMAIN = Domain(
    name="commerce",
    description="An online shop: customers, products, orders, cancellations, returns, exchanges.",
    tools=TOOLS,
    build_state=build_state,
    authored_tasks=authored_tasks,
    policy=(
        "You are a customer-service agent. Authenticate the customer (email, or name and ZIP) "
        "before changing anything. Pending orders can be cancelled or modified; delivered "
        "orders can be returned or exchanged for another variant of the same product."
    ),
)
