#!/usr/bin/env python3
"""Fails when a crate of the workspace declares a dependency its sources
never name.

For each package (the root's and every workspace member's), each
dependency must be named in a Rust source the dependency can reach:
`[dependencies]` in any `.rs` file of the package, `[dev-dependencies]` in
any too (tests, benches, examples and doc examples use them),
`[build-dependencies]` in `build.rs`. Named means `name::`, `use name`,
`name!`, `extern crate name` or `name as`, with `-` read as `_` and the key
of a renamed dependency (`package = ...`) as the name the code uses. A
dependency needed only for its features, or through a macro that names it
for the code, is listed with the reason under `[package.metadata.ci]
used-without-naming`. It reads the sources, not the build: a name in a
comment counts, so it catches a dependency nothing mentions.
"""

import glob
import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("dependencies", "dev-dependencies", "build-dependencies")


def packages():
    workspace = tomllib.load(open(os.path.join(ROOT, "Cargo.toml"), "rb"))
    dirs = [ROOT] if "package" in workspace else []
    for pattern in workspace["workspace"]["members"]:
        dirs += sorted(d for d in glob.glob(os.path.join(ROOT, pattern)) if os.path.isfile(os.path.join(d, "Cargo.toml")))
    # Not part of the root package's sources: the members, the excluded
    # folders and the build's output.
    skip = {os.path.join(ROOT, d) for d in workspace["workspace"].get("exclude", [])}
    skip |= {d for d in dirs if d != ROOT} | {os.path.join(ROOT, "target")}
    return [(d, skip) for d in dirs]


def sources(package, skip):
    found = []
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = [s for s in subfolders if os.path.join(folder, s) not in skip and s != "target"]
        found += [os.path.join(folder, f) for f in files if f.endswith(".rs")]
    return found


def named(text, name):
    ident = re.escape(name.replace("-", "_"))
    return re.search(rf"(?<![\w:]){ident}(::|!|\s*;|\s+as\b)|extern crate {ident}\b", text) is not None


def main():
    unused, checked = [], 0
    for package, skip in packages():
        manifest = tomllib.load(open(os.path.join(package, "Cargo.toml"), "rb"))
        allowed = manifest.get("package", {}).get("metadata", {}).get("ci", {}).get("used-without-naming", [])
        files = sources(package, skip)
        texts = {path: open(path, encoding="utf-8").read() for path in files}
        tables = [manifest] + list(manifest.get("target", {}).values())
        for table in tables:
            for section in SECTIONS:
                for name in table.get(section, {}):
                    checked += 1
                    if name in allowed:
                        continue
                    reach = [t for p, t in texts.items() if section != "build-dependencies" or p.endswith("build.rs")]
                    if not any(named(text, name) for text in reach):
                        unused.append(f"{os.path.relpath(os.path.join(package, 'Cargo.toml'), ROOT)}: [{section}] {name}")
    if checked == 0:
        sys.exit("unused-dependencies: no dependency found to check")
    if unused:
        print("dependencies no source names (remove them, or list them under [package.metadata.ci] used-without-naming with the reason):", file=sys.stderr)
        for line in unused:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    print(f"unused-dependencies: {checked} dependencies checked, each named by its crate's sources")


main()
