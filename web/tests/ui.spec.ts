// The web UI against the real kvad-serve (scripted models, a real SQLite file, a fake Hub on loopback): every
// page renders, a pull streams its progress, a model loads, a chat streams with its reasoning trace and is kept,
// a token is inspected in the playground, two variants run side by side, a benchmark runs and a second is refused. Each page is photographed
// into docs/screenshots for the README.
import { expect, test, type Page } from '@playwright/test';
import { join } from 'node:path';

const shots = process.env.KVAD_SCREENSHOTS ?? join(import.meta.dirname, '../../docs/screenshots');
const shot = (page: Page, name: string) => page.screenshot({ path: join(shots, `${name}.png`) });

test.describe.configure({ mode: 'serial' });

test('the dashboard renders what the server says', async ({ page }) => {
  await page.goto('/');
  await expect(page.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await expect(page.getByTestId('queue-depth')).toHaveText('0');
  await expect(page.getByText('Nothing is loaded.')).toBeVisible();
  // Pages that do not exist yet are absent from the nav, not empty shells.
  const nav = page.getByRole('navigation', { name: 'Pages' });
  for (const absent of ['Images', 'Videos']) {
    await expect(nav.getByRole('link', { name: absent })).toHaveCount(0);
  }
  await expect(nav.getByRole('link')).toHaveText(['kvad', 'Dashboard', 'Models', 'Chat', 'Playground', 'Training', 'Datasets', 'Evals', 'Benchmarks', 'Monitoring', 'Settings', 'API']);
});

test('a pull from the Hub shows progress per file, and a model loads', async ({ page }) => {
  await page.goto('/models');
  await page.getByLabel('Model to pull').fill('tiny/llama');
  await page.getByRole('button', { name: 'Pull', exact: true }).click();
  const weights = page.locator('li[data-file="model.safetensors"]');
  await expect(weights).toBeVisible();
  await expect(page.getByRole('status').filter({ hasText: 'tiny/llama is in the cache' })).toBeVisible();
  // The weights' bar is full, and the bytes are the file's.
  const bar = weights.locator('progress');
  expect(await bar.getAttribute('value')).toBe(await bar.getAttribute('max'));
  await expect(weights).toContainText(' of ');
  await expect(page.getByRole('region', { name: 'On disk' }).getByRole('cell', { name: 'tiny/llama' })).toBeVisible();

  // Another backend than the server's (scripted): the model loads on it and the picker shows where it is. A tab
  // opened before the load still offers Load; a third backend from there is the server's 409, shown as worded.
  const row = page.locator('tr[data-model="qwen2.5-scripted"]');
  const stale = await page.context().newPage();
  await stale.goto('/models');
  const staleRow = stale.locator('tr[data-model="qwen2.5-scripted"]');
  await expect(staleRow.getByRole('button', { name: 'Load' })).toBeVisible();
  await expect(row.getByLabel('Backend for qwen2.5-scripted')).toHaveValue('scripted');
  await row.getByLabel('Backend for qwen2.5-scripted').selectOption('cpu-q8');
  await row.getByRole('button', { name: 'Load' }).click();
  await expect(row.getByText('in memory')).toBeVisible();
  await expect(row.getByLabel('Backend for qwen2.5-scripted')).toHaveValue('cpu-q8');
  await staleRow.getByLabel('Backend for qwen2.5-scripted').selectOption('cpu-q4');
  await staleRow.getByRole('button', { name: 'Load' }).click();
  await expect(stale.getByRole('alert')).toContainText(
    'backend = "cpu-q4": model qwen2.5-scripted is loaded on cpu-q8 (qwen2.5-scripted@cpu-q8); unload it first',
  );
  await stale.close();

  const qwen3 = page.locator('tr[data-model="qwen3-scripted"]');
  await qwen3.getByRole('button', { name: 'Load' }).click();
  await expect(qwen3.getByText('in memory')).toBeVisible();
  await expect(qwen3.getByRole('button', { name: 'Unload' })).toBeVisible();
  await shot(page, 'models');
  // The dashboard's table of what is in memory (/api/ps) names each model with the backend it is on.
  await page.goto('/');
  const loaded = page.getByRole('region', { name: 'Loaded models' });
  await expect(loaded.getByRole('cell', { name: 'qwen2.5-scripted@cpu-q8' })).toBeVisible();
  await expect(loaded.getByRole('cell', { name: 'qwen3-scripted@scripted' })).toBeVisible();
});

test('a chat streams its reply with the reasoning trace above it, and keeps the answer only', async ({ page }) => {
  await page.goto('/chat');
  await page.getByLabel('Model').selectOption('qwen3-scripted');
  await page.getByLabel('Message', { exact: true }).fill('Hello there');
  await page.getByLabel('Message', { exact: true }).press('Enter');
  const reply = page.getByRole('article', { name: 'assistant message' }).last();
  await expect(reply.locator('.content')).toHaveText('Hello!');
  const trace = reply.locator('details.trace');
  await expect(trace.locator('.trace-text')).toContainText('The user greets me. I greet back.', { useInnerText: false });
  // Collapsed once the answer shows; it opens on a click.
  await expect(trace).not.toHaveAttribute('open');
  await trace.locator('summary').click();
  await expect(trace.locator('.trace-text')).toBeVisible();
  await expect(page).toHaveURL(/\/chat\/\d+$/);
  await shot(page, 'chat');

  // Reloaded from SQLite: the question and the answer, and no trace.
  await page.reload();
  await expect(page.getByRole('heading', { name: 'Hello there', level: 1 })).toBeVisible();
  const kept = page.getByRole('article', { name: 'assistant message' });
  await expect(kept.locator('.content')).toHaveText('Hello!');
  await expect(kept.locator('details.trace')).toHaveCount(0);
  await expect(page.getByRole('complementary', { name: 'Conversations' }).getByRole('link', { name: /Hello there/ })).toBeVisible();
});

test('a tool call the model makes is shown', async ({ page }) => {
  await page.goto('/chat');
  await page.getByLabel('Model').selectOption('qwen2.5-scripted');
  await page.getByLabel('Tools offered (JSON)').fill('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]');
  await page.getByLabel('Message', { exact: true }).fill('What is the weather in Oslo?');
  await page.getByRole('button', { name: 'Send' }).click();
  const call = page.getByRole('article', { name: 'assistant message' }).last().getByLabel('tool call');
  await expect(call).toContainText(/get_weather\(\{"city": ?"Oslo"\}\)/);
});

test('a reply streams piece by piece and Stop ends it', async ({ page }) => {
  await page.goto('/chat');
  await page.getByLabel('Model').selectOption('slow-scripted');
  await page.getByLabel('Message', { exact: true }).fill('Count for me');
  await page.getByRole('button', { name: 'Send' }).click();
  const reply = page.getByRole('article', { name: 'assistant message' }).last();
  // Part of the reply is on the page while the rest is still coming.
  await expect(reply.locator('.content')).toContainText('one two');
  await expect(page.getByRole('button', { name: 'Stop' })).toBeVisible();
  await page.getByRole('button', { name: 'Stop' }).click();
  await expect(reply.getByText('Stopped.')).toBeVisible();
  await expect(reply.locator('.content')).not.toContainText('twenty-four');
  await expect(page.getByRole('button', { name: 'Send' })).toBeVisible();
});

test('the playground shows a token\'s alternatives with their probabilities and marks, and tokenizes', async ({ page }) => {
  await page.goto('/playground');
  await page.getByLabel('Model', { exact: true }).selectOption('qwen2.5-scripted');
  await page.getByLabel('Alternatives').fill('3');
  await page.getByRole('button', { name: 'Generate' }).click();
  const first = page.getByRole('button', { name: /^token 1:/ });
  await expect(first).toBeVisible();
  await first.click();
  await expect(first).toHaveAttribute('aria-pressed', 'true');
  const alts = page.getByRole('table', { name: 'alternatives' });
  await expect(alts.getByRole('row')).toHaveCount(4);
  await expect(alts.getByRole('row').nth(1)).toContainText('70.0%');
  await expect(alts.getByRole('row').nth(1)).toContainText('picked');
  await expect(alts.getByRole('row', { name: /maybe/ })).toContainText('in play');
  await expect(alts.getByRole('row', { name: /never/ })).toContainText('cut by top-k/top-p');

  await page.getByLabel('Text', { exact: true }).fill('abcdefg');
  await page.getByRole('button', { name: /Tokenize with/ }).click();
  await expect(page.getByTestId('token-count')).toHaveText('3');
  await expect(page.getByRole('list', { name: 'tokens' }).getByRole('listitem')).toHaveText([
    `abc${(97 + 98 + 99) % 256}`,
    `def${(100 + 101 + 102) % 256}`,
    'g103',
  ]);
  await shot(page, 'playground');
});

test('side by side runs two variants in turn, says how each was placed, and shows where the replies part', async ({ page }) => {
  await page.goto('/playground');
  await page.getByLabel('Prompt').fill('Hello there');
  await page.getByLabel('Max tokens').fill('6');
  // One model on two backends: loaded in turn (it is on cpu-q8 from the Models test, so A unloads it first), the
  // same script, the same tokens.
  await page.getByLabel('Model A').selectOption('qwen2.5-scripted');
  await page.getByLabel('Backend A').selectOption('cpu-q4');
  await page.getByLabel('Model B').selectOption('qwen2.5-scripted');
  await page.getByLabel('Backend B').selectOption('cpu-q8');
  await page.getByRole('button', { name: 'Compare' }).click();
  await expect(page.getByTestId('sbs-verdict')).toHaveText('The same 6 tokens.');
  await expect(page.getByTestId('placed-A')).toHaveText(/^unloaded qwen2\.5-scripted@cpu-q8, then loaded qwen2\.5-scripted@cpu-q4 in /);
  await expect(page.getByTestId('placed-B')).toHaveText(/^unloaded qwen2\.5-scripted@cpu-q4, then loaded qwen2\.5-scripted@cpu-q8 in /);
  await expect(page.getByRole('article', { name: 'variant A' })).toContainText('6 tokens · first after');
  await expect(page.getByText('run in turn and not raced')).toBeVisible();

  // Two models: their replies part at the first token, marked in both; B was in memory already.
  await page.getByLabel('Model B').selectOption('qwen3-scripted');
  await page.getByLabel('Backend B').selectOption('');
  await page.getByLabel('Backend A').selectOption('cpu-q8');
  await page.getByRole('button', { name: 'Compare' }).click();
  await expect(page.getByTestId('sbs-verdict')).toHaveText(/^Equal for 0 tokens, then «.+» against «.+»\.$/);
  await expect(page.getByTestId('placed-A')).toHaveText('qwen2.5-scripted@cpu-q8 was in memory');
  await expect(page.getByTestId('placed-B')).toHaveText('qwen3-scripted@scripted was in memory');
  await expect(page.locator('.parts')).toHaveCount(2);
  await shot(page, 'playground-side-by-side');
});

test('a benchmark runs its rounds and charts medians and ranges; a second is refused naming the first', async ({ page, request }) => {
  await page.goto('/benchmarks');
  await page.getByLabel('Rounds').fill('2');
  await page.getByLabel('Tokens per sample').fill('8');
  await page.getByRole('checkbox', { name: 'qwen2.5-scripted' }).check();
  await page.getByRole('checkbox', { name: 'smollm2-scripted' }).check();
  await page.getByRole('button', { name: 'Start benchmark' }).click();
  await expect(page.getByTestId('bench-done')).toBeVisible();
  await expect(page.getByRole('table', { name: 'samples' }).getByRole('row')).toHaveCount(5);
  await expect(page.getByRole('img', { name: /Decode speed/ })).toBeVisible();
  await shot(page, 'benchmarks');

  // A slow benchmark started elsewhere: the page is refused, and told whose run is in the way.
  const other = request.post('/api/bench', { data: { models: ['slow-scripted'], rounds: 2, max_tokens: 40 } });
  await expect.poll(async () => (await (await request.get('/api/bench')).json()).running).toBe(true);
  await page.getByRole('button', { name: 'Start benchmark' }).click();
  await expect(page.getByRole('alert')).toContainText('a benchmark is already running: slow-scripted for account "local"');
  await other;
});

test('monitoring charts the Prometheus figures and shows usage by account', async ({ page, request }) => {
  await page.goto('/monitoring');
  await expect(page.getByRole('heading', { name: 'Monitoring', level: 1 })).toBeVisible();
  await expect(page.getByRole('cell', { name: 'local', exact: true })).toBeVisible();
  // The series grow a point per poll; a completion sent meanwhile shows as tokens per second above zero.
  const series = (title: string) => page.locator('figure', { hasText: title }).locator('polyline');
  const ys = async (title: string) =>
    ((await series(title).getAttribute('points')) ?? '').split(' ').filter(Boolean).map((p) => Number(p.split(',')[1]));
  await expect.poll(async () => (await ys('Queue depth')).length).toBeGreaterThanOrEqual(2);
  const r = await request.post('/v1/completions', { data: { model: 'qwen2.5-scripted', prompt: 'Hi', max_tokens: 20 } });
  expect(r.status()).toBe(200);
  await expect.poll(async () => Math.min(...(await ys('Tokens generated'))), { timeout: 10_000 }).toBeLessThan(76);
  await shot(page, 'monitoring');
});

test('the dashboard lists recent requests', async ({ page }) => {
  await page.goto('/');
  await expect(page.getByRole('cell', { name: 'qwen3-scripted' }).first()).toBeVisible();
  await shot(page, 'dashboard');
});

test('settings shows the server values and changes a live limit', async ({ page, request }) => {
  await page.goto('/settings');
  await expect(page.getByText('needs a restart').first()).toBeVisible();
  await page.getByLabel('queue_per_account').fill('3');
  await page.getByRole('button', { name: 'Apply live changes' }).click();
  await expect(page.getByRole('status').filter({ hasText: 'Changed queue_per_account' })).toBeVisible();
  expect((await (await request.get('/api/queue')).json()).limits.queue_per_account).toBe(3);
  await shot(page, 'settings');
});

test('the API page lists the routes from the route table', async ({ page }) => {
  await page.goto('/api');
  await expect(page.getByRole('heading', { name: 'API', level: 1 })).toBeVisible();
  await expect(page.getByRole('cell', { name: '/api/tokenize' })).toBeVisible();
  await page.getByLabel('Filter routes').fill('conversations');
  await expect(page.getByRole('cell', { name: '/v1/chat/completions' })).toHaveCount(0);
  await page.getByLabel('Filter routes').fill('');
  await shot(page, 'api');
  await page.goto('/no-such-page');
  await expect(page.getByRole('heading', { name: 'Not found' })).toBeVisible();
});

test('datasets are checked on upload, a model trains from scratch with its loss charted, and a suite is scored', async ({ page }) => {
  await page.goto('/datasets');
  await page.getByLabel('File').setInputFiles({ name: 'bad.jsonl', mimeType: 'application/json', buffer: Buffer.from('{"text": 5}\n') });
  await page.getByRole('button', { name: 'Upload' }).click();
  await expect(page.getByText('line 1: field text: must be a string')).toBeVisible();
  const text = 'the cat sat on the mat. '.repeat(8);
  await page.getByLabel('File').setInputFiles({ name: 'cat.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
  await page.getByLabel('Held out for validation').fill('0');
  await page.getByRole('button', { name: 'Upload' }).click();
  await expect(page.getByTestId('dataset-summary')).toHaveText('1 plain records, 1 to train on, 0 held out');
  const suite = '{"prompt": "Hi", "expected": "Hi.", "scorer": "contains"}\n{"prompt": "Hi", "expected": "Bye"}\n';
  await page.getByLabel('File').setInputFiles({ name: 'suite.jsonl', mimeType: 'application/json', buffer: Buffer.from(suite) });
  await page.getByRole('button', { name: 'Upload' }).click();
  await expect(page.getByRole('table', { name: 'datasets' }).getByRole('row')).toHaveCount(3);
  // A Hub dataset's split, fetched by the server (Parquet, from the fake Hub).
  await page.getByLabel('Dataset repo').fill('tiny/cats');
  await page.getByRole('button', { name: 'Fetch' }).click();
  await expect(page.getByTestId('dataset-summary')).toHaveText('3 text records, 3 to train on, 0 held out');
  await expect(page.getByRole('table', { name: 'datasets' }).getByRole('row')).toHaveCount(4);
  await shot(page, 'datasets');

  await page.goto('/training');
  await page.getByLabel('Dataset').selectOption({ label: 'cat.txt' });
  await page.getByLabel('Output name').fill('ui-cat');
  await page.getByLabel('Steps', { exact: true }).fill('40');
  await page.getByLabel('Learning rate').fill('0.01');
  await page.getByLabel('Warmup steps').fill('4');
  await page.getByLabel('Tokens a row').fill('32');
  await page.getByRole('button', { name: 'Start training' }).click();
  await expect(page.getByTestId('train-status')).toHaveText('done: trained:ui-cat after 40 steps');
  await expect(page.getByRole('img', { name: /Loss/ })).toBeVisible();
  await expect(page.getByRole('table', { name: 'runs' }).getByRole('cell', { name: 'done' })).toBeVisible();
  await shot(page, 'training');

  await page.goto('/evals');
  await page.getByLabel('Model 1').selectOption('smollm2-scripted');
  await page.getByRole('button', { name: 'Run eval' }).click();
  await expect(page.getByTestId('eval-score').first()).toHaveText('smollm2-scripted 1/2 (50.0%)');
  // The same model on two backends, side by side: each placed in turn by the server.
  await page.getByLabel('Backend 1').selectOption('cpu-q8');
  await page.getByRole('button', { name: 'Add a model' }).click();
  await page.getByLabel('Model 2').selectOption('smollm2-scripted');
  await page.getByLabel('Backend 2').selectOption('cpu-q4');
  await page.getByRole('button', { name: 'Run eval' }).click();
  await expect(page.getByTestId('eval-score')).toHaveCount(2);
  await expect(page.getByTestId('eval-score').first()).toHaveText('smollm2-scripted@cpu-q8 1/2 (50.0%) · smollm2-scripted@cpu-q4 1/2 (50.0%)');
  await page.getByRole('button', { name: 'Compare' }).click();
  await expect(page.getByRole('status').filter({ hasText: 'Every item scored the same in both runs.' })).toBeVisible();
  await shot(page, 'evals');
});

test('chat beside a training run says it is slower, with the ratio the server measured; the run resumes', async ({ page }) => {
  const chat = () => page.request.post('/v1/chat/completions', {
    data: { model: 'smollm2-scripted', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 },
  });
  expect((await chat()).ok()).toBeTruthy();
  const ds = await (await page.request.post('/api/datasets?name=long.txt&validation=0', { data: 'the dog ran in the park' })).json();
  // Wide enough that a step takes some milliseconds: a run of tiny steps floods its followers with events.
  const config = { architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', vocab_size: 257, n_embd: 128, n_layer: 2, n_head: 2, n_positions: 64, eos_token_id: 256 };
  const job = await (await page.request.post('/api/jobs', {
    data: { kind: 'train', output: 'ui-long', config, tokenizer: 'bytes', dataset: ds.id, steps: 1000000, seq_len: 64, save_every: 20 },
  })).json();
  try {
    await page.goto('/chat');
    await expect(page.getByTestId('slower')).toContainText('A training run is going on this server: replies are slower');
    expect((await chat()).ok()).toBeTruthy();
    await expect(page.getByTestId('slower')).toContainText(/(are slower: |run at )\d+\.\d\d× the speed before it \(.* tokens\/s on smollm2-scripted, 1 reply since it started\)/);
    await shot(page, 'chat-slower');
  } finally {
    await page.request.delete(`/api/jobs/${job.id}`);
  }
  await expect(page.getByTestId('slower')).toHaveCount(0, { timeout: 10000 });

  // The cancelled run goes on from its latest checkpoint as a new job, and stops again when cancelled.
  await page.goto('/training');
  const runs = page.getByRole('table', { name: 'runs' });
  await runs.getByRole('row').filter({ hasText: 'trained:ui-long' }).getByRole('button', { name: 'Resume' }).click();
  await expect(runs.getByRole('cell', { name: 'running' })).toBeVisible();
  await runs.getByRole('button', { name: 'Cancel' }).click();
  await expect(runs.getByRole('cell', { name: 'cancelled' })).toHaveCount(2);
});
