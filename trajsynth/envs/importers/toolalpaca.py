"""Import ToolAlpaca toolsets (Tang et al. 2023, arXiv:2306.05301; tangqiaoyu/ToolAlpaca).

A ToolAlpaca record describes one API: ``Documentation`` is an OpenAPI 3.0 document (as a
JSON string) and ``Function_Projection`` maps function names to ``[path, http_method]``
(FORMATS.md §1.7, §2). Steps, per record:

0) repair two documentation slips seen in the data (AviationAPI): path items nested inside
   another path item, and ``components`` placed under ``paths``; both are hoisted;

then per operation:

1) name it: the ``Function_Projection`` key for its (path, method), else its operationId,
   else ToolAlpaca's convention ``<path segments joined by _>_<method>``
   (``/preferred-routes/search`` GET → ``preferred-routes_search_get``), which is what the
   golden answers call;
2) resolve ``$ref`` pointers (``#/components/...``) in the operation, with a depth limit so
   recursive schemas end in a plain ``{"type": "object"}``;
3) parameters: path-level and operation-level ``parameters`` (query, path, header) become
   properties with their schema and description, ``required: true`` ones go in ``required``;
   a JSON ``requestBody`` object schema adds its properties (a non-object body becomes one
   ``body`` property);
4) the response schema is the JSON schema of the first 2xx (or ``default``) response;
5) ``extra`` keeps the HTTP method, path, server URL and the API's name and category.

A record whose documentation is not JSON, or a projected function that does not exist in it,
is listed as a failure; the other functions still import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core.errors import InputNotFoundError
from ..spec import Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, read_json, require_path

__all__ = ["convert_openapi_operation", "import_toolalpaca"]

_MAX_REF_DEPTH = 6
_HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options", "trace"}


def _resolve(node: Any, doc: dict[str, Any], depth: int = 0, stack: tuple[str, ...] = ()) -> Any:
    """Step 2: inline ``$ref`` pointers into ``doc``."""
    if isinstance(node, list):
        return [_resolve(v, doc, depth, stack) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/"):
            raise ConversionError(f"external $ref {ref!r} is not supported")
        if ref in stack or depth >= _MAX_REF_DEPTH:
            return {"type": "object", "description": f"(recursive {ref.rsplit('/', 1)[-1]})"}
        target: Any = doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise ConversionError(f"$ref {ref!r} points nowhere")
            target = target[part]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, doc, depth + 1, (*stack, ref))
    return {k: _resolve(v, doc, depth, stack) for k, v in node.items()}


def _clean_schema(schema: Any) -> dict[str, Any]:
    """OpenAPI 3.0 schema object → JSON Schema (drops OpenAPI-only keys that break 2020-12)."""
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("xml", "externalDocs", "discriminator", "readOnly", "writeOnly"):
            continue
        if key == "nullable":
            continue
        if key == "example":
            out["examples"] = [value]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {k: _clean_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = _clean_schema(value)
        elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
            out[key] = [_clean_schema(v) for v in value]
        elif key == "required" and not isinstance(value, list):
            continue
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            continue  # OpenAPI 3.0 booleans; 2020-12 wants numbers
        else:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _json_content_schema(content: Any) -> dict[str, Any] | None:
    if not isinstance(content, dict):
        return None
    for media in ("application/json", "text/json", "*/*", *content.keys()):
        body = content.get(media)
        if isinstance(body, dict) and isinstance(body.get("schema"), dict):
            return body["schema"]
    return None


def convert_openapi_operation(
    doc: dict[str, Any], name: str, path: str, method: str, *, description: str = ""
) -> ToolSpec:
    """Steps 1-5 for one operation of an OpenAPI document."""
    # 1) the operation
    item = (doc.get("paths") or {}).get(path)
    if not isinstance(item, dict):
        raise ConversionError(f"path {path!r} is not in the documentation")
    method = method.lower()
    op = item.get(method)
    if not isinstance(op, dict):
        raise ConversionError(f"{method.upper()} {path} is not in the documentation")
    # 2) resolve references (only in the parts used, so a broken error-response $ref does not
    #    sink the whole operation)
    shared = _resolve(item.get("parameters") or [], doc)
    own = _resolve(op.get("parameters") or [], doc)
    # 3) parameters and body
    props: dict[str, Any] = {}
    required: list[str] = []
    for param in [*shared, *own]:
        if not isinstance(param, dict) or not isinstance(param.get("name"), str):
            raise ConversionError("a parameter has no name")
        if param.get("in") == "cookie":
            continue
        schema = _clean_schema(param.get("schema") or {"type": "string"})
        if param.get("description") and "description" not in schema:
            schema["description"] = param["description"]
        props[param["name"]] = schema
        if param.get("required") and param["name"] not in required:
            required.append(param["name"])
    body = _resolve(op.get("requestBody"), doc)
    if isinstance(body, dict):
        body_schema = _json_content_schema(body.get("content"))
        if body_schema is not None:
            schema = _clean_schema(body_schema)
            if schema.get("type", "object") == "object" and isinstance(
                schema.get("properties"), dict
            ):
                props.update(schema["properties"])
                required += [r for r in schema.get("required", []) if r not in required]
            else:
                props["body"] = schema
                if body.get("required"):
                    required.append("body")
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = required
    # 4) response
    response = None
    for code, resp in sorted((op.get("responses") or {}).items(), key=lambda kv: str(kv[0])):
        if not (str(code).startswith("2") or code == "default") or not isinstance(resp, dict):
            continue
        resp = _resolve(resp, doc)
        schema = _json_content_schema(resp.get("content")) or resp.get("schema")
        if isinstance(schema, dict):
            response = _clean_schema(schema)
            if resp.get("description") and "description" not in response:
                response["description"] = resp["description"]
            break
    # 5) provenance
    servers = doc.get("servers") or [{}]
    text = description or op.get("summary") or op.get("description") or ""
    return ToolSpec(
        name=name,
        description=str(text).strip(),
        parameters=parameters,
        response=response,
        extra={"method": method.upper(), "path": path, "server": servers[0].get("url", "")},
    )


def repair_document(doc: dict[str, Any]) -> dict[str, Any]:
    """Step 0: hoist nested path items and a misplaced ``components`` (returns a new doc)."""
    paths = dict(doc.get("paths") or {})
    components = paths.pop("components", None)
    for key, item in list(paths.items()):
        if not isinstance(item, dict):
            continue
        nested = {k: v for k, v in item.items() if k.startswith("/")}
        if nested:
            paths[key] = {k: v for k, v in item.items() if not k.startswith("/")}
            for k, v in nested.items():
                paths.setdefault(k, v)
    out = {**doc, "paths": paths}
    if isinstance(components, dict) and "components" not in doc:
        out["components"] = components
    return out


def operation_name(path: str, method: str) -> str:
    """ToolAlpaca's name for an operation without operationId.

    >>> operation_name("/preferred-routes/search", "get")
    'preferred-routes_search_get'
    """
    return "_".join([*(p for p in path.strip("/").split("/") if p), method.lower()])


def _operations(doc: dict[str, Any], projection: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, [path, method]) for every operation; projected names first, in their order."""
    out: list[tuple[str, Any]] = list(projection.items())
    taken = {
        (t[0], str(t[1]).lower())
        for t in projection.values()
        if isinstance(t, list) and len(t) == 2
    }
    for path, item in (doc.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for method, op in item.items():
            if method.lower() not in _HTTP_METHODS or (path, method.lower()) in taken:
                continue
            name = (op.get("operationId") if isinstance(op, dict) else None) or operation_name(
                path, method
            )
            out.append((str(name), [path, method]))
    return out


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(path.rglob("*.json"))
    if not files:
        raise InputNotFoundError(f"{path}: no ToolAlpaca .json files")
    return files


def import_toolalpaca(src: str | Path) -> Toolset:
    """Import every projected function of every ToolAlpaca record in ``src``."""
    path = require_path(src)
    builder = ToolsetBuilder(name=path.stem, format="toolalpaca", source=path)
    for file in _files(path):
        data = read_json(file)
        if not isinstance(data, list):
            builder.fail(file.name, "expected a list of ToolAlpaca records", str(file))
            continue
        for record in data:
            builder.records += 1
            if not isinstance(record, dict):
                builder.fail(file.name, "record is not a JSON object", str(file))
                continue
            api = str(record.get("Name", "?"))
            projection = record.get("Function_Projection") or {}
            descriptions = record.get("Function_Description") or {}
            try:
                doc = json.loads(record.get("Documentation") or "")
                if not isinstance(doc, dict):
                    raise ValueError("not an object")
            except (TypeError, ValueError) as exc:
                for fname in projection or [api]:
                    builder.fail(fname, f"Documentation of {api!r} is not JSON ({exc})", api)
                continue
            doc = repair_document(doc)
            for fname, target in _operations(doc, projection):
                loc = f"{file.name}#{api}"

                def convert(
                    f=fname, t=target, d=doc, a=api, loc=loc, desc=descriptions, rec=record
                ) -> ToolSpec:
                    if not (isinstance(t, list) and len(t) == 2):
                        raise ConversionError(f"projection {t!r} is not [path, method]")
                    spec = convert_openapi_operation(
                        d, f, t[0], t[1], description=str(desc.get(f) or "")
                    )
                    extra = {**spec.extra, "api": a, "category": rec.get("Category", "")}
                    return spec.model_copy(update={"source": loc, "extra": extra})

                builder.add(fname, convert, source=loc)
    return builder.build()
