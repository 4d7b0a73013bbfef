"""Regenerates stripe_vectors.json: signature headers judged by Stripe's official
Python library (`pip install stripe`), for tests/integration/stripe_compat.rs.

    python3 stripe_vectors.py > stripe_vectors.json

Each vector is a header, body and secret with the library's verdict (timestamp
check off) and, for a header it signs itself, the header it generates.
"""
import json
from stripe import WebhookSignature, SignatureVerificationError

SECRET = "whsec_test_secret"
BODY = '{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}'
T = 1732264800


def sig(body=BODY, secret=SECRET, t=T):
    return WebhookSignature.generate_signature_header(body, secret, timestamp=t).split(",v1=")[1]


GOOD = sig()
OTHER = sig(secret="whsec_other")
headers = [
    f"t={T},v1={GOOD}",
    f"v1={GOOD},t={T}",
    f"t={T},v1={OTHER},v1={GOOD}",
    f"t={T},v1={GOOD},v1={OTHER}",
    f"t={T},v0={GOOD}",
    f"t={T},v0=abc,v1={GOOD}",
    f"t={T},v1={GOOD}=trailing",
    f"t={T},v1={GOOD}==",
    f"t=+{T},v1={GOOD}",
    f"t=000{T},v1={GOOD}",
    f"t={T},t={T},v1={GOOD}",
    f"t={T}, v1={GOOD}",
    f"t={T},v1={GOOD.upper()}",
    f"t={T},v1=,v1={GOOD}",
    f"t={T},v1=",
    f"t={T},junk,v1={GOOD}",
    f"t={T},v1={GOOD[:-1]}",
    f"t={T},v1={GOOD}0",
    f"t={T},v1={OTHER}",
    f"t={T + 1},v1={GOOD}",
    f"t={T},x=1=2=3,v1={GOOD}",
    f"t={T},v1={GOOD},",
    f",t={T},v1={GOOD}",
    f"t={T};v1={GOOD}",
    "garbage",
    f"v1={GOOD}",
]
vectors = []
for header in headers:
    for body, secret in [(BODY, SECRET), (BODY + " ", SECRET), (BODY, "whsec_other")]:
        try:
            WebhookSignature.verify_header(body, header, secret, tolerance=None)
            verdict = True
        except SignatureVerificationError:
            verdict = False
        vectors.append({"header": header, "body": body, "secret": secret, "accepted": verdict})

signed = [
    {"body": b, "secret": s, "t": t, "header": WebhookSignature.generate_signature_header(b, s, timestamp=t)}
    for b, s, t in [(BODY, SECRET, T), ("", "whsec_x", 0), ('{"a":"\u00e9"}', "whsec_\u00fc", 99999999999)]
]
print(json.dumps({"verify": vectors, "sign": signed}, indent=1, ensure_ascii=False))
