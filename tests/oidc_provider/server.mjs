// A real OpenID provider for guardd's tests: oidc-provider (OpenID Certified)
// on a loopback port, with a handful of users in groups, a login page for the
// browser, and three test-only endpoints under /test/:
//
//   POST /test/rotate             a new signing key replaces the old one
//   POST /test/redirect {uri}     allow one more redirect URI for the console client
//   POST /test/sign {claims, header?}
//                                 a JWT signed with the provider's current key,
//                                 for claims no real sign-in would give
//                                 (expired, another audience, ...)
//
// Usage: node server.mjs PORT. Prints "listening <issuer>" once it answers.

import http from 'node:http';
import crypto from 'node:crypto';

import Provider from 'oidc-provider';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;

export const CLIENT_ID = 'guard-console';

// name -> { password, email, name, groups }
const USERS = {
  alice: { password: 'alice-pw', email: 'alice@example.test', name: 'Alice Admin', groups: ['guard-admins'] },
  bob: { password: 'bob-pw', email: 'bob@example.test', name: 'Bob Approver', groups: ['guard-approvers'] },
  carol: { password: 'carol-pw', email: 'carol@example.test', name: 'Carol Viewer', groups: ['guard-viewers'] },
  dave: { password: 'dave-pw', name: 'Dave Nogroup', groups: [] },
  // An email no operator name may hold (a right-to-left override): shown by name.
  erin: { password: 'erin-pw', email: 'erin\u202e@example.test', name: 'Erin Admin', groups: ['guard-admins'] },
  // An email the provider says is unverified: shown by name.
  frank: {
    password: 'frank-pw', email: 'alice@example.test', emailVerified: false, name: 'Frank Admin', groups: ['guard-admins'],
  },
};

const state = { keys: [], redirectUris: new Set(), provider: null };

async function newKey() {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = await exportJWK(privateKey);
  return { ...jwk, kid: crypto.randomUUID(), alg: 'RS256', use: 'sig' };
}

function build() {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: CLIENT_ID,
      token_endpoint_auth_method: 'none', // a public client: the browser holds no secret
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: [...state.redirectUris],
    }],
    jwks: { keys: state.keys },
    pkce: { required: () => true },
    claims: {
      openid: ['sub', 'groups'],
      email: ['email', 'email_verified'],
      profile: ['name'],
    },
    // The scopes' claims go into the ID token itself, the token guardd reads.
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: false } },
    ttl: { IdToken: 300, AccessToken: 300, RefreshToken: 3600, Session: 3600, Grant: 3600 },
    clientBasedCORS: (ctx, origin) => {
      try {
        return ['127.0.0.1', 'localhost'].includes(new URL(origin).hostname);
      } catch {
        return false;
      }
    },
    findAccount: (ctx, sub) => {
      const user = USERS[sub];
      if (!user) return undefined;
      return {
        accountId: sub,
        claims: () => ({
          sub,
          email: user.email,
          email_verified: user.emailVerified,
          name: user.name,
          groups: user.groups,
        }),
      };
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    cookies: { keys: ['test-provider-cookie-key'] },
    renderError: (ctx, out) => {
      ctx.type = 'html';
      ctx.body = `<!doctype html><title>error</title><pre>${escape(JSON.stringify(out))}</pre>`;
    },
  });
  provider.proxy = false;
  return provider;
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function loginPage(uid, message) {
  return `<!doctype html>
<html><head><title>Test provider sign-in</title></head>
<body>
<h1>Sign in</h1>
${message ? `<p id="error">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
  <label>User <input id="login" name="login" autocomplete="username" autofocus></label>
  <label>Password <input id="password" name="password" type="password"></label>
  <button id="submit" type="submit">Sign in</button>
</form>
</body></html>`;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

function answer(res, status, body, type = 'application/json') {
  res.writeHead(status, { 'Content-Type': type });
  res.end(type === 'application/json' ? JSON.stringify(body) : body);
}

async function interaction(req, res, uid, action) {
  const provider = state.provider;
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) {
    answer(res, 400, { error: 'interaction mismatch' });
    return;
  }
  const { prompt, params, session } = details;
  if (prompt.name === 'consent') {
    // Every user consents to the console: the test provider has no consent page.
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  if (action === 'login' && req.method === 'POST') {
    const form = new URLSearchParams(await readBody(req));
    const login = form.get('login') ?? '';
    const user = Object.hasOwn(USERS, login) ? USERS[login] : undefined;
    if (!user || user.password !== form.get('password')) {
      answer(res, 200, loginPage(uid, 'Unknown user or wrong password.'), 'text/html');
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    return;
  }
  answer(res, 200, loginPage(uid), 'text/html');
}

async function testEndpoint(req, res, path) {
  const body = req.method === 'POST' ? JSON.parse((await readBody(req)) || '{}') : {};
  if (path === '/test/rotate') {
    state.keys = [await newKey()];
    state.provider = build();
    answer(res, 200, { kid: state.keys[0].kid });
  } else if (path === '/test/redirect') {
    state.redirectUris.add(body.uri);
    state.provider = build();
    answer(res, 200, { redirect_uris: [...state.redirectUris] });
  } else if (path === '/test/sign') {
    const jwk = state.keys[0];
    const key = crypto.createPrivateKey({ key: jwk, format: 'jwk' });
    const token = await new SignJWT(body.claims)
      .setProtectedHeader({ alg: 'RS256', kid: jwk.kid, typ: 'JWT', ...(body.header ?? {}) })
      .sign(key);
    answer(res, 200, { token });
  } else {
    answer(res, 404, { error: 'no such test endpoint' });
  }
}

state.keys = [await newKey()];
state.provider = build();

const server = http.createServer(async (req, res) => {
  const path = new URL(req.url, issuer).pathname;
  try {
    if (req.method === 'POST' && path.startsWith('/test/')) {
      await testEndpoint(req, res, path);
      return;
    }
    const match = /^\/interaction\/([^/]+)(?:\/(login))?$/.exec(path);
    if (match) {
      await interaction(req, res, match[1], match[2]);
      return;
    }
    state.provider.callback()(req, res);
  } catch (err) {
    if (!res.headersSent) answer(res, 500, { error: String(err) });
  }
});

server.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
