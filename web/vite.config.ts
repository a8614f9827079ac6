import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// `npm run dev` proxies the API to a kvad-serve on the default port, so the UI can be worked on with hot reload.
const api = process.env.KVAD_URL ?? 'http://127.0.0.1:5823';

export default defineConfig({
  plugins: [svelte()],
  build: { outDir: 'dist', emptyOutDir: true, assetsDir: 'assets', target: 'es2022', sourcemap: false },
  server: {
    proxy: Object.fromEntries(['/api/', '/v1/', '/metrics'].map((p) => [p, { target: api, changeOrigin: false }])),
  },
});
