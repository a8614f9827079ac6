import { defineConfig } from '@playwright/test';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Driven by crates/server/tests/web.rs, which starts the real kvad-serve (and a fake Hugging Face Hub) and passes
// their addresses in KVAD_URL and KVAD_AUTH_URL. The browser is Debian's Chromium (scripts/test.sh installs it);
// Playwright downloads none of its own.
export default defineConfig({
  testDir: 'tests',
  fullyParallel: false,
  workers: 1,
  retries: 0,
  timeout: 60_000,
  expect: { timeout: 15_000 },
  reporter: [['list']],
  outputDir: join(tmpdir(), 'kvad-playwright'),
  use: {
    baseURL: process.env.KVAD_URL,
    viewport: { width: 1280, height: 800 },
    colorScheme: 'light',
    launchOptions: { executablePath: process.env.KVAD_CHROMIUM ?? '/usr/bin/chromium' },
    trace: 'off',
  },
});
