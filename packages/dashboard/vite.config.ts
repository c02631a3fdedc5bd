// Vite builds the dashboard into dist/: index.html and hashed files under assets/, which svcd
// serves from memory with a strict Content-Security-Policy (no inline script or style).
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    // No data: URLs for assets: every file is served by svcd with its own type and cache rule.
    assetsInlineLimit: 0,
    // Stylesheets are files, never inlined (the CSP has no 'unsafe-inline').
    cssCodeSplit: false,
    sourcemap: false,
  },
});
