// A real OpenID provider for kvad's OIDC test (crates/server/tests/oidc.rs), on a free loopback port.
// One confidential client (CLIENT_ID, CLIENT_SECRET, REDIRECT_URL from the environment). Signing in needs no form:
// the interaction signs in the account named by the last POST /test/next-account?name=..., and grants are given
// without a consent page. Prints "issuer <url>" once it listens.
import http from "node:http";
import Provider from "oidc-provider";

let nextAccount = "alice";

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: process.env.CLIENT_ID,
        client_secret: process.env.CLIENT_SECRET,
        redirect_uris: [process.env.REDIRECT_URL],
        response_types: ["code"],
        grant_types: ["authorization_code"],
      },
    ],
    cookies: { keys: ["kvad-test-cookie-key"] },
    conformIdTokenClaims: false,
    claims: { openid: ["sub"], profile: ["preferred_username"], email: ["email"] },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(ctx, id) {
      return { accountId: id, claims: async () => ({ sub: id, preferred_username: id, email: `${id}@example.test` }) };
    },
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope("openid profile email");
      await grant.save();
      return grant;
    },
  });
  provider.proxy = false;
  const callback = provider.callback();
  server.on("request", async (req, res) => {
    const url = new URL(req.url, issuer);
    if (req.method === "POST" && url.pathname === "/test/next-account") {
      nextAccount = url.searchParams.get("name");
      res.writeHead(204).end();
      return;
    }
    if (url.pathname.startsWith("/interaction/")) {
      try {
        await provider.interactionFinished(req, res, { login: { accountId: nextAccount } }, { mergeWithLastSubmission: false });
      } catch (e) {
        res.writeHead(500).end(String(e));
      }
      return;
    }
    callback(req, res);
  });
  console.log(`issuer ${issuer}`);
});
