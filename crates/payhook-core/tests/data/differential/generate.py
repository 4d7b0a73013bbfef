"""Header variants for the differential test against Stripe's official verifiers.

Run through ./regenerate.sh, which installs the pinned libraries into a
temporary directory. Two steps:

    python3 generate.py cases > cases.json       # variants + the Python verdicts
    node node_verdicts.js < cases.json > node.json
    python3 generate.py fixture cases.json node.json > ../signature_differential.json

The variants are mutations of valid headers (separators, whitespace in every
position, case, signs and zeros in `t`, repeated and empty items, items without
`=`, non-ASCII text, very long values), drawn from a fixed seed so a run is
reproducible. Every verifier runs with a 300 s tolerance at a fixed time.

`expected` is the verdict both libraries give when they agree, except for the
one deliberate difference (a timestamp further in the future than the
tolerance is refused), and the strict reading of the protocol when they
disagree (see `strict_verdict`).
"""
import hashlib
import hmac
import json
import random
import sys

T = 1732264800
NOW = T + 10
TOLERANCE = 300
BODIES = [
    '{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}',
    '{"id":"evt_2","type":"payment.succeeded","data":{"object":{"description":"caf\u00e9 \u2615 \U0001F600"}}}',
    '{\n  "id": "evt_3",\n  "type": "x.y",\n  "data": null\n}\n',
]
SECRETS = ["whsec_test_secret", "whsec_other", "whsec_\u00fc\u00f1\u00ee"]

# Leading characters both `int()` and JavaScript's `parseInt` skip, and the
# trailing ones `int()` accepts (parseInt ignores whatever follows the digits).
# Measured: `int(c + "5" + c)` over every code point, and `parseInt(c + "5")`.
LEADING_WS = "\t\n\v\f\r \u00a0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
PYTHON_WS = LEADING_WS + "\x85"


def sign(body, secret, t):
    return hmac.new(secret.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()


def strict_t(value):
    """The protocol's reading of a `t` value: whitespace both libraries skip,
    an optional `+`, ASCII digits, then only whitespace both accept."""
    i = 0
    while i < len(value) and value[i] in LEADING_WS:
        i += 1
    if i < len(value) and value[i] == "+":
        i += 1
    start = i
    while i < len(value) and value[i] in "0123456789":
        i += 1
    if i == start or any(c not in PYTHON_WS for c in value[i:]):
        return None
    return int(value[start:i])


def strict_verdict(header, body, secret):
    if header == "":
        return False
    stamps, sigs = [], []
    for item in header.split(","):
        parts = item.split("=")
        key, value = parts[0], (parts[1] if len(parts) > 1 else None)
        if key == "t":
            t = None if value is None else strict_t(value)
            if t is None:
                return False
            stamps.append(t)
        elif key == "v1":
            if value is None:
                return False
            sigs.append(value)
    if not stamps or len(set(stamps)) > 1 or abs(NOW - stamps[0]) > TOLERANCE:
        return False
    expected = sign(body, secret, stamps[0])
    return any(s == expected for s in sigs)


def python_verdict(header, body, secret):
    import stripe._webhook as webhook

    webhook.time.time = lambda: NOW
    try:
        webhook.WebhookSignature.verify_header(body, header, secret, tolerance=TOLERANCE)
        return True
    except Exception:  # SignatureVerificationError, and TypeError for non-ASCII signatures
        return False


def future_beyond_tolerance(header):
    """Whether the `t` both libraries read lies further ahead than the tolerance."""
    for item in header.split(","):
        parts = item.split("=")
        if parts[0] == "t" and len(parts) > 1:
            t = strict_t(parts[1])
            if t is not None and t - NOW > TOLERANCE:
                return True
    return False


POOL = [" ", "\t", "\u00a0", "\u3000", "\ufeff", "\x1c", "\u2028", "\x85", ",", "=", ";", ":", "+", "-", "0",
        "_", ".", "e", "x", "t", "v", "1", "\u00e9", "\u0661", "\uff11", "\U0001F600", "A", "f"]
T_FORMS = [
    "{t}", "+{t}", "0{t}", "000{t}", "+000{t}", "-{t}", " {t}", "{t} ", "\t{t}", "{t}\t", "\u00a0{t}", "{t}\u00a0",
    "\u3000{t}", "\ufeff{t}", "{t}\ufeff", "\x1c{t}", "{t}\x1c", "{t}\x85", "\u2028{t}", "{t}.0", "{t}.5", "{t}e0",
    "{t}abc", "{t}\u00e9", "+ {t}", " +{t}", "++{t}", "0x{t}", "{t}_", "{u}", "{t}0", "", " ", "+", "{f}", "{a}",
    "{t} 1", "{t},", "-0",
]


def t_text(form, t):
    underscored = f"{t:_}"
    fullwidth = "".join(chr(0xFF10 + int(d)) for d in str(t))
    arabic = "".join(chr(0x0660 + int(d)) for d in str(t))
    return form.format(t=t, u=underscored, f=fullwidth, a=arabic, z="0" * 1000)


def python_int(text):
    try:
        return int(text)
    except ValueError:
        return None


def js_parse_int(text):
    """JavaScript's parseInt(text, 10), enough for these forms."""
    js_ws = "\t\n\v\f\r \u00a0\ufeff\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
    i = 0
    while i < len(text) and text[i] in js_ws:
        i += 1
    sign_ = 1
    if i < len(text) and text[i] in "+-":
        sign_ = -1 if text[i] == "-" else 1
        i += 1
    start = i
    while i < len(text) and text[i] in "0123456789":
        i += 1
    return None if i == start else sign_ * int(text[start:i])


def header_variants(rng, body, secret):
    good = sign(body, secret, T)
    other = sign(body, "whsec_wrong", T)
    items = [f"t={T}", f"v1={good}"]
    layout = rng.randrange(8)
    if layout == 1:
        items = [f"v1={good}", f"t={T}"]
    elif layout == 2:
        items = [f"t={T}", f"v1={other}", f"v1={good}"]
    elif layout == 3:
        items = [f"t={T}", f"v1={good}", f"v1={other}"]
    elif layout == 4:
        items = [f"t={T}", f"v0={good}", f"v1={good}"]
    elif layout == 5:
        items = [f"t={T}", f"v1={other}"]
    elif layout == 6 and rng.randrange(4) == 0:
        items = [f"t={T}"] + [f"v1={sign(body, f'whsec_{i}', T)}" for i in range(rng.randrange(4, 9))] + [f"v1={good}"]
    yield ",".join(items)
    # Item-level changes.
    pick = rng.randrange(len(items) + 1)
    extras = ["", "t", "v1", "v1=", "junk", "=", "t=", "v1==", f"t={T}", f"t={T + 1}", f"v1={good.upper()}",
              f"v1={good[:-1]}", f"v1={good}0", f"v1= {good}", f" v1={good}", f"V1={good}", f"T={T}",
              "v1=" + "\u00e9" * 64, "v1=" + "\u00e9" * 3, "v1=" + "a" * 63 + "\u00e9", "x=1=2=3",
              f"t={T}={T}", f"v1={good}={good}"]
    # Very long values, now and then.
    extra = rng.choice(["v1=" + "0" * 3000, "y=" + "z" * 8000, f"t={'0' * 2000}{T}"]) if rng.randrange(60) == 0 else rng.choice(extras)
    mutated = items[:pick] + [extra] + items[pick:]
    yield ",".join(mutated)
    # `t` forms, signed for each reading of them.
    form = rng.choice(T_FORMS)
    text = t_text(form, T)
    for t in {T, python_int(text), js_parse_int(text)}:
        if t is not None:
            v1 = f"v1={sign(body, secret, t)}"
            yield ",".join([f"t={text}", v1] if rng.randrange(2) else [v1, f"t={text}"])
    # Character-level changes anywhere.
    header = ",".join(items)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(5)
        pos = rng.randrange(len(header) + 1)
        if op <= 1:
            header = header[:pos] + rng.choice(POOL) + header[pos:]
        elif op == 2 and header:
            header = header[:pos] + header[pos + 1:]
        elif op == 3:
            header = header.replace(",", rng.choice([";", ", ", ",,", " ,", "\t,", ",\u00a0"]), 1)
        else:
            header = header.swapcase() if rng.randrange(4) == 0 else header.replace("=", rng.choice(["==", " =", "= ", ":"]), 1)
    yield header
    # Many items.
    if rng.randrange(150) == 0:
        yield ",".join([f"t={T}"] + ["junk=1"] * 500 + [f"v1={good}"])


def cases():
    rng = random.Random(20241122)
    seen, out = set(), []
    while len(out) < 2000:
        b = rng.choice([0, 0, 0, 1, 2])
        s = rng.choice([0, 0, 0, 1, 2])
        for header in header_variants(rng, BODIES[b], SECRETS[s]):
            if (header, b, s) in seen or header == "":
                continue
            seen.add((header, b, s))
            out.append({"header": header, "body": b, "secret": s,
                        "python": python_verdict(header, BODIES[b], SECRETS[s])})
    return {"time": NOW, "tolerance": TOLERANCE, "bodies": BODIES, "secrets": SECRETS, "cases": out}


def fixture(cases_path, node_path, versions):
    data = json.load(open(cases_path, encoding="utf-8"))
    node = json.load(open(node_path, encoding="utf-8"))
    assert len(node) == len(data["cases"])
    counts = {"agree": 0, "disagree": 0, "future": 0}
    for case, node_verdict in zip(data["cases"], node):
        body, secret = BODIES[case["body"]], SECRETS[case["secret"]]
        case["node"] = node_verdict
        if node_verdict == case["python"]:
            counts["agree"] += 1
            expected = node_verdict
            if expected and future_beyond_tolerance(case["header"]):
                counts["future"] += 1
                expected = False
        else:
            counts["disagree"] += 1
            expected = strict_verdict(case["header"], body, secret)
        case["expected"] = expected
    data["libraries"] = versions
    print(json.dumps(counts), file=sys.stderr)
    return data


def dump(data):
    # One case per line: a diff shows which verdicts changed.
    cases_ = data.pop("cases")
    text = json.dumps(data, ensure_ascii=False)[:-1] + ',\n"cases":[\n'
    text += ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases_) + "\n]}\n"
    return text


if __name__ == "__main__":
    if sys.argv[1] == "cases":
        sys.stdout.write(dump(cases()))
    else:
        sys.stdout.write(dump(fixture(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))))
