// Bundles the extension into one file (vscode is provided by the editor).
import { build } from 'esbuild';

await build({
    entryPoints: ['extension/src/extension.ts'],
    bundle: true,
    outfile: 'extension/dist/extension.js',
    external: ['vscode'],
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    sourcemap: true,
    minify: process.argv.includes('--minify'),
    logLevel: 'warning',
});
