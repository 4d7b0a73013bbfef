// Reads the cases written by `generate.py cases` on stdin and prints, for each,
// whether the official stripe-node verifier accepts the header (300 s
// tolerance at the fixture's time).
const Stripe = require('stripe');

const stripe = new Stripe('sk_test_unused');
const input = require('fs').readFileSync(0, 'utf8');
const data = JSON.parse(input);
const verdicts = data.cases.map((c) => {
  try {
    stripe.webhooks.signature.verifyHeader(
      data.bodies[c.body],
      c.header,
      data.secrets[c.secret],
      data.tolerance,
      undefined,
      data.time * 1000,
    );
    return true;
  } catch (err) {
    return false;
  }
});
process.stdout.write(JSON.stringify(verdicts));
