#!/usr/bin/env python3
"""The public API of one crate, one line per item, from its rustdoc JSON.

    public-api.py target/doc/payhook_core.json > public-api/payhook-core.txt

Lists every public path (modules followed from the crate root, re-exports
as `pub use`), each struct's public fields, each enum's variants, each
function and method with its signature, and the traits implemented by
hand. `#[doc(hidden)]` items are left out. Sorted, so a diff shows exactly
what changed.
"""
import json
import sys


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    root = doc["root"]
    lines = set()

    def hidden(item):
        return any("doc(hidden)" in json.dumps(attr) for attr in item.get("attrs", []))

    def public(item):
        return item.get("visibility") == "public"

    def path_name(p):
        return p.get("path") or p.get("name") or "?"

    def generic_args(args):
        if not args:
            return ""
        ab = args.get("angle_bracketed")
        if ab:
            parts = []
            for a in ab.get("args", []):
                if "type" in a:
                    parts.append(ty(a["type"]))
                elif "lifetime" in a:
                    parts.append(a["lifetime"])
                elif "const" in a:
                    parts.append(str(a["const"].get("expr", "_")))
            for c in ab.get("constraints", []):
                binding = c.get("binding", {})
                if "equality" in binding and "type" in binding["equality"]:
                    parts.append(f'{c["name"]} = {ty(binding["equality"]["type"])}')
            return f"<{', '.join(parts)}>" if parts else ""
        pa = args.get("parenthesized")
        if pa:
            out = ty(pa["output"]) if pa.get("output") else "()"
            return f"({', '.join(ty(t) for t in pa.get('inputs', []))}) -> {out}"
        return ""

    def bound(b):
        if "trait_bound" in b:
            return path_name(b["trait_bound"]["trait"]) + generic_args(b["trait_bound"]["trait"].get("args"))
        if "outlives" in b:
            return b["outlives"]
        return "?"

    def ty(t):
        if t is None:
            return "()"
        (kind, v), = t.items()
        if kind == "resolved_path":
            return path_name(v) + generic_args(v.get("args"))
        if kind in ("primitive", "generic"):
            return v
        if kind == "borrowed_ref":
            lt = (v.get("lifetime") or "") + " " if v.get("lifetime") else ""
            return f"&{lt}{'mut ' if v.get('is_mutable') else ''}{ty(v['type'])}"
        if kind == "tuple":
            return f"({', '.join(ty(x) for x in v)})"
        if kind == "slice":
            return f"[{ty(v)}]"
        if kind == "array":
            return f"[{ty(v['type'])}; {v['len']}]"
        if kind == "impl_trait":
            return "impl " + " + ".join(bound(b) for b in v)
        if kind == "dyn_trait":
            return "dyn " + " + ".join(path_name(p["trait"]) + generic_args(p["trait"].get("args")) for p in v["traits"])
        if kind == "qualified_path":
            return f"<{ty(v['self_type'])}>::{v['name']}"
        if kind == "raw_pointer":
            return f"*{'mut' if v.get('is_mutable') else 'const'} {ty(v['type'])}"
        return kind

    def signature(name, fn):
        sig = fn["sig"]
        def receiver(t):
            shown = ty(t)
            return {"Self": "self", "&Self": "&self", "&mut Self": "&mut self"}.get(shown, f"self: {shown}")

        inputs = ", ".join(receiver(t) if n == "self" else f"{n}: {ty(t)}" for n, t in sig["inputs"])
        header = fn.get("header", {})
        prefix = ("const " if header.get("is_const") else "") + ("async " if header.get("is_async") else "")
        gens = [p["name"] for p in fn.get("generics", {}).get("params", []) if not p["name"].startswith("impl ")]
        out = f" -> {ty(sig['output'])}" if sig.get("output") else ""
        return f"{prefix}fn {name}{'<' + ', '.join(gens) + '>' if gens else ''}({inputs}){out}"

    def impls(prefix, ids):
        for impl_id in ids:
            impl = index.get(str(impl_id))
            if impl is None:
                continue
            inner = impl["inner"]["impl"]
            if inner.get("is_synthetic") or inner.get("blanket_impl"):
                continue
            if inner.get("trait"):
                lines.add(f"impl {path_name(inner['trait'])}{generic_args(inner['trait'].get('args'))} for {prefix}")
                continue
            for item_id in inner["items"]:
                item = index.get(str(item_id))
                if item and public(item) and not hidden(item):
                    (kind, v), = item["inner"].items()
                    if kind == "function":
                        lines.add(f"{prefix}::{signature(item['name'], v)}")
                    elif kind == "assoc_const" or kind == "constant":
                        lines.add(f"const {prefix}::{item['name']}")
                    else:
                        lines.add(f"{kind} {prefix}::{item['name']}")

    def walk(item_id, prefix, seen):
        item = index.get(str(item_id))
        if item is None or hidden(item) or item_id in seen:
            return
        seen = seen | {item_id}
        (kind, v), = item["inner"].items()
        name = item.get("name")
        here = f"{prefix}::{name}" if prefix else name
        if kind == "module":
            if prefix:
                lines.add(f"mod {here}")
            for child in v["items"]:
                c = index.get(str(child))
                if c is not None and (public(c) or "use" in c["inner"]):
                    walk(child, here, seen)
            return
        if kind == "use":
            if not public(item):
                return
            target = index.get(str(v.get("id"))) if v.get("id") is not None else None
            if target is not None and not v.get("is_glob"):
                # A re-export of this crate's own item: listed under this path.
                renamed = dict(target, name=v["name"])
                index[str(v["id"]) + "@" + here] = renamed
                walk(str(v["id"]) + "@" + here, prefix, seen)
            else:
                lines.add(f"pub use {prefix}::{v['name']} = {v['source']}{'::*' if v.get('is_glob') else ''}")
            return
        if kind == "struct":
            lines.add(f"struct {here}")
            k = v["kind"]
            if "plain" in k:
                for f in k["plain"]["fields"]:
                    fi = index.get(str(f))
                    if fi and public(fi) and not hidden(fi):
                        lines.add(f"{here}.{fi['name']}: {ty(fi['inner']['struct_field'])}")
            elif "tuple" in k:
                for n, f in enumerate(k["tuple"]):
                    fi = index.get(str(f)) if f is not None else None
                    if fi and public(fi):
                        lines.add(f"{here}.{n}: {ty(fi['inner']['struct_field'])}")
            impls(here, v.get("impls", []))
        elif kind == "enum":
            lines.add(f"enum {here}")
            for var in v["variants"]:
                vi = index.get(str(var))
                if vi and not hidden(vi):
                    lines.add(f"{here}::{vi['name']}")
            impls(here, v.get("impls", []))
        elif kind == "function":
            lines.add(signature(here, v))
        elif kind == "trait":
            lines.add(f"trait {here}")
            for t in v["items"]:
                ti = index.get(str(t))
                if ti and not hidden(ti):
                    (tk, tv), = ti["inner"].items()
                    if tk == "function":
                        lines.add(f"{here}::{signature(ti['name'], tv)}")
                    else:
                        lines.add(f"{tk} {here}::{ti['name']}")
        elif kind == "constant":
            lines.add(f"const {here}: {ty(v['type'])}")
        elif kind == "static":
            lines.add(f"static {here}: {ty(v['type'])}")
        elif kind == "type_alias":
            lines.add(f"type {here} = {ty(v['type'])}")
        elif kind == "macro":
            lines.add(f"macro {name}!")
        else:
            lines.add(f"{kind} {here}")

    walk(root, "", frozenset())
    print("\n".join(sorted(lines)))


if __name__ == "__main__":
    main(sys.argv[1])
