// Bundles the extension (Node, vscode provided by the editor) and the panel's webview script (browser, uPlot inside),
// and writes the panel's stylesheet (uPlot's, then ours) next to them.
import { build } from 'esbuild';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';

const minify = process.argv.includes('--minify');
const require = createRequire(import.meta.url);

await build({
    entryPoints: ['extension/src/extension.ts'],
    bundle: true,
    outfile: 'extension/dist/extension.js',
    external: ['vscode'],
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    sourcemap: true,
    minify,
    logLevel: 'warning',
});

await build({
    entryPoints: ['extension/src/webview/main.ts'],
    bundle: true,
    outfile: 'extension/dist/webview.js',
    format: 'iife',
    platform: 'browser',
    target: 'es2022',
    sourcemap: false,
    minify,
    logLevel: 'warning',
});

mkdirSync('extension/dist', { recursive: true });
const uplotCss = readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8');
writeFileSync('extension/dist/panel.css', `${uplotCss}\n${readFileSync('extension/src/webview/panel.css', 'utf8')}`);
