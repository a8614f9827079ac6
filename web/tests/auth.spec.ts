// Accounts in the browser, against a kvad-serve started in `local` authentication mode (KVAD_AUTH_URL, first
// administrator "admin" with KVAD_ADMIN_PASSWORD). Until the accounts layer is merged the server has no
// /api/auth/me (404): then, and only then, these tests skip, saying so loudly.
import { expect, test, request as newRequest, type Page } from '@playwright/test';
import { join } from 'node:path';

const url = process.env.KVAD_AUTH_URL ?? '';
const adminPassword = process.env.KVAD_ADMIN_PASSWORD ?? '';
const shots = process.env.KVAD_SCREENSHOTS ?? join(import.meta.dirname, '../../docs/screenshots');

test.describe.configure({ mode: 'serial' });
test.use({ baseURL: url });

let missing = '';

test.beforeAll(async () => {
  if (!url) throw new Error('KVAD_AUTH_URL is not set: crates/server/tests/web.rs starts the server in local mode');
  const api = await newRequest.newContext({ baseURL: url });
  const me = await api.get('/api/auth/me');
  if (me.status() === 404) {
    missing = 'GET /api/auth/me is 404: this kvad-serve has no accounts layer yet (branch auth not merged)';
    console.log(`\n${'!'.repeat(100)}\n!!! AUTH TESTS SKIPPED: ${missing}\n${'!'.repeat(100)}\n`);
  }
  await api.dispose();
});

test.beforeEach(() => {
  test.skip(!!missing, missing);
});

async function signIn(page: Page, name: string, password: string) {
  await page.goto('/');
  await page.getByLabel('Username').fill(name);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test('sign in: a wrong password is refused, the right one opens the dashboard', async ({ page }) => {
  await page.goto('/');
  await expect(page.getByRole('heading', { name: 'Sign in to kvad' })).toBeVisible();
  await page.screenshot({ path: join(shots, 'signin.png') });
  await signIn(page, 'admin', 'not the password');
  await expect(page.getByRole('alert')).toHaveText('Wrong username or password.');
  await signIn(page, 'admin', adminPassword);
  await expect(page.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page.getByRole('heading', { name: 'Sign in to kvad' })).toBeVisible();
});

test('an API key is created, shown once, and revoked', async ({ page }) => {
  await signIn(page, 'admin', adminPassword);
  await page.getByRole('link', { name: 'Settings' }).click();
  await page.getByLabel('Name of the new key').fill('laptop');
  await page.getByRole('button', { name: 'Create key' }).click();
  const key = (await page.getByTestId('new-key').textContent()) ?? '';
  expect(key.length).toBeGreaterThan(20);
  const keys = page.getByRole('table', { name: 'API keys' });
  await expect(keys.getByRole('row', { name: /laptop/ })).toBeVisible();
  // The key works as a bearer token, until it is revoked.
  const api = await newRequest.newContext({ baseURL: url });
  expect((await api.get('/api/queue', { headers: { authorization: `Bearer ${key}` } })).status()).toBe(200);
  await keys.getByRole('button', { name: 'Revoke laptop' }).click();
  // Listed as revoked (the server keeps the row), with nothing left to revoke.
  await expect(keys.getByRole('row', { name: /laptop/ })).toContainText('revoked');
  await expect(keys.getByRole('button', { name: 'Revoke laptop' })).toHaveCount(0);
  expect((await api.get('/api/queue', { headers: { authorization: `Bearer ${key}` } })).status()).toBe(401);
  await api.dispose();
});

test('a user sees "needs an administrator" on an administrator\'s section', async ({ page, browser }) => {
  await signIn(page, 'admin', adminPassword);
  await page.getByRole('link', { name: 'Settings' }).click();
  await page.getByRole('form', { name: 'Add a user' }).getByLabel('Username').fill('alice');
  await page.getByRole('form', { name: 'Add a user' }).getByLabel('Password').fill('alice-password-1');
  await page.getByRole('button', { name: 'Add user' }).click();
  await expect(page.getByRole('table', { name: 'users' }).getByRole('cell', { name: 'alice', exact: true })).toBeVisible();

  const ctx = await browser.newContext({ baseURL: url });
  const alice = await ctx.newPage();
  await signIn(alice, 'alice', 'alice-password-1');
  await expect(alice.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await alice.getByRole('link', { name: 'Settings' }).click();
  await expect(alice.getByRole('region', { name: 'Users' }).getByRole('alert')).toContainText('This needs an administrator.');
  await ctx.close();
});
