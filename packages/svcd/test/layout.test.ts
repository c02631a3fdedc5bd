// The layout's rules, read from the sources' import lines: no import cycles in any package, the
// API layer imported by nothing below it (api -> domain -> store/runtime/proxy), and the engine's
// client library imported only by the runtime. An import cycle makes module order matter (a class
// read before its module ran is undefined) and hides which way a dependency points.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';

const PACKAGES = resolve(import.meta.dirname, '../..');

/** Every .ts file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** What a file imports or re-exports, type-only imports included: relative paths resolved to .ts files, packages by name. */
function importsOf(file: string): { local: string[]; packages: string[] } {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s+'([^']+)'/gms)].map((m) => m[1]!);
  return {
    local: specifiers.filter((s) => s.startsWith('.')).map((s) => resolve(dirname(file), s.replace(/\.js$/, '.ts'))),
    packages: specifiers.filter((s) => !s.startsWith('.')),
  };
}

/** The cycles of an import graph, each as the files around it. */
function importCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    path.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') cycles.push([...path.slice(path.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return cycles;
}

describe('layout', () => {
  test('the cycle finder finds a cycle and passes a chain', () => {
    assert.deepEqual(importCycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']]])), [['a', 'b', 'c', 'a']]);
    assert.deepEqual(importCycles(new Map([['a', ['b']], ['b', ['c']], ['c', []]])), []);
  });

  // The TypeScript packages (svc-init is Go).
  for (const pkg of readdirSync(PACKAGES).filter((p) => existsSync(join(PACKAGES, p, 'tsconfig.json')))) {
    test(`packages/${pkg}: no import cycles`, () => {
      const src = join(PACKAGES, pkg, 'src');
      const files = sources(src);
      assert.ok(files.length > 0, `no sources in ${src}`);
      const graph = new Map(files.map((f) => [f, importsOf(f).local]));
      const cycles = importCycles(graph).map((c) => c.map((f) => relative(src, f)).join(' -> '));
      assert.deepEqual(cycles, []);
    });
  }

  test('svcd: nothing below the API imports it, and only the engine drivers (Docker, Swarm) import dockerode', () => {
    const src = join(PACKAGES, 'svcd', 'src');
    // The composition root (app.ts, main.ts, index.ts) wires the API to the rest; everything
    // else is the API itself or below it.
    const root = new Set(['app.ts', 'main.ts', 'index.ts']);
    const upward: string[] = [];
    const engineClients: string[] = [];
    for (const file of sources(src)) {
      const name = relative(src, file);
      const { local, packages } = importsOf(file);
      if (!name.startsWith('api/') && !root.has(name)) {
        for (const target of local) if (relative(src, target).startsWith('api/')) upward.push(`${name} -> ${relative(src, target)}`);
      }
      if (packages.includes('dockerode') && !name.startsWith('runtime/docker/') && !name.startsWith('runtime/swarm/')) engineClients.push(name);
    }
    assert.deepEqual(upward, [], 'imports of the API from below it');
    assert.deepEqual(engineClients, [], 'dockerode outside runtime/docker/ and runtime/swarm/');
  });

  test('svcd: the driver ports are types only, and the memory driver owes nothing to the Docker one', () => {
    const runtime = join(PACKAGES, 'svcd', 'src', 'runtime');
    for (const port of ['driver.ts', 'image-builder.ts']) {
      const text = readFileSync(join(runtime, port), 'utf8');
      // Declarations only: interfaces, type aliases and type-only imports and exports.
      const values = text.split('\n').filter((line) => /^(?:export\s+)?(?:const|let|var|function|class|async|enum)\b/.test(line) || /^(?:import|export)\s+(?!type\b)[^\n]*\bfrom\b/.test(line));
      assert.deepEqual(values, [], `${port} holds values`);
    }
    const memory = sources(join(runtime, 'memory')).flatMap((f) => importsOf(f).local.filter((t) => t.startsWith(join(runtime, 'docker'))));
    assert.deepEqual(memory, []);
  });
});
