// What svc prints for people, as snapshots of the formatting on fixed data and a fixed clock,
// and the command tree's own promises: an example for every command whose options exist, and a
// completion script that completes through bash.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, test } from 'node:test';
import type { Command } from 'commander';
import { buildProgram, COMMAND_GROUPS, groupOf } from '../src/program.js';
import { allCommands, commandPath, EXAMPLES } from '../src/examples.js';
import { bashCompletion } from '../src/commands/completion.js';
import { ApiError, SvcClient } from '@svc/client';
import { uploadAndBuild } from '../src/commands/deploy.js';
import { colorWanted, fields, output, pollPauseMs, relativeTime, table, waitUntil, type CellStyle } from '../src/output.js';

process.env.TZ = 'UTC';
const run = promisify(execFile);
const NOW = Date.UTC(2026, 10, 26, 12, 0, 0);
const plain: CellStyle = { color: false, now: NOW };
const at = (secondsAgo: number) => NOW / 1000 - secondsAgo;

describe('svc output for people', () => {
  const services = [
    { id: 'a1', name: 'web', image: 'nginx:alpine', port: 80, status: 'running', url: 'http://web.example.com', dns_label: 'web', last_error: null, crash_count: 0, circuit_open: false, last_crash_at: null, created_at: at(180), updated_at: at(60) },
    { id: 'b2', name: 'worker', image: '', port: 8000, status: 'failed', url: null, dns_label: 'worker', last_error: 'exited with code 1', crash_count: 2, circuit_open: false, last_crash_at: at(7200), created_at: at(3 * 86_400), updated_at: at(7200) },
  ];

  test('a service list shows id, name, status, URL and age; --wide every field, times as local dates with how long ago', () => {
    assert.equal(
      table(services, { columns: ['id', 'name', 'status', 'url', 'age'] }, plain),
      ['ID  NAME    STATUS   URL                     AGE', 'a1  web     running  http://web.example.com  3 min', 'b2  worker  failed   -                       3 d', ''].join('\n'),
    );
    const wide = table(services, undefined, plain).split('\n');
    assert.match(wide[0]!, /^ID\s+NAME\s+IMAGE\s+PORT\s+STATUS\s+URL\s+DNS_LABEL\s+LAST_ERROR\s+CRASH_COUNT\s+CIRCUIT_OPEN\s+LAST_CRASH_AT\s+CREATED_AT\s+UPDATED_AT$/);
    assert.match(wide[2]!, /worker .* exited with code 1 .* 2026-11-26 10:00 \(2 h ago\)\s+2026-11-23 12:00 \(3 d ago\)\s+2026-11-26 10:00 \(2 h ago\)$/);
    assert.equal(table([], { columns: ['id'] }, plain), '(none)\n');
  });

  test('one object is a field per line; usage reads used/max', () => {
    const usage = { services: { used: 0, max: 5 }, databases: { used: 2, max: 3 }, memory_mb: 512, disk_measured_at: at(30), disk_measured_never: null };
    assert.equal(
      fields(usage, plain),
      ['services             0/5', 'databases            2/3', 'memory_mb            512', 'disk_measured_at     2026-11-26 11:59 (30 s ago)', 'disk_measured_never  -', ''].join('\n'),
    );
  });

  test('--json prints the API\'s JSON as it came, whatever the view; a string alone for people', () => {
    const printed = (json: boolean, value: unknown) => {
      let text = '';
      const write = process.stdout.write.bind(process.stdout);
      process.stdout.write = ((chunk: string) => ((text += chunk), true));
      try {
        output({ json: () => json, wide: () => false, color: true, now: () => NOW }).print(value, { columns: ['name'] });
      } finally {
        process.stdout.write = write;
      }
      return text;
    };
    assert.equal(printed(true, services.slice(0, 1)), `${JSON.stringify(services.slice(0, 1), null, 2)}\n`);
    assert.equal(printed(true, { used: 1, max: 2 }), '{\n  "used": 1,\n  "max": 2\n}\n');
    assert.equal(printed(true, 'http://web.example.com'), '"http://web.example.com"\n');
    assert.equal(printed(false, 'http://web.example.com'), 'http://web.example.com\n');
    assert.equal(printed(false, services.slice(0, 1)), 'NAME\nweb\n');
  });

  test('times ahead and behind, and nested values', () => {
    assert.deepEqual([5, 45, 600, 7200, 90_000, -600, -7200].map((s) => relativeTime(at(s), NOW)), ['just now', '45 s ago', '10 min ago', '2 h ago', '1 d ago', 'in 10 min', 'in 2 h']);
    assert.equal(fields({ tags: ['a', 'b'], nested: { k: 1 }, empty: [] }, plain), 'tags    a, b\nnested  {"k":1}\nempty   -\n');
  });

  test('statuses in colour only on a terminal without NO_COLOR, and columns stay aligned', () => {
    const colored = table(services, { columns: ['name', 'status', 'age'] }, { color: true, now: NOW });
    assert.equal(colored, ['NAME    STATUS   AGE', 'web     \u001b[32mrunning\u001b[0m  3 min', 'worker  \u001b[31mfailed\u001b[0m   3 d', ''].join('\n'));
    assert.equal(colorWanted({}, true), true);
    assert.equal(colorWanted({ NO_COLOR: '1' }, true), false);
    assert.equal(colorWanted({ NO_COLOR: '' }, true), true, 'an empty NO_COLOR is unset (no-color.org)');
    assert.equal(colorWanted({ TERM: 'dumb' }, true), false);
    assert.equal(colorWanted({}, false), false, 'not on a pipe or a file');
  });
});

describe('waiting for a build or a deploy', () => {
  test('asks every 50 ms for 2 s (at most 40 of the tenant\'s 200-request burst), then ten times a second until 10 s, then once a second', () => {
    assert.deepEqual([0, 1_999, 2_000, 9_999, 10_000, 600_000].map(pollPauseMs), [50, 50, 100, 100, 1000, 1000]);
    let asked = 0;
    for (let t = 0; t < 2_000; t += pollPauseMs(t)) asked++;
    assert.ok(asked <= 40, String(asked));
  });

  test('the pause counts from the question: an answer the server held (?wait) is followed by the next question at once, a quick one after the pause; each question is told the time left', async () => {
    const quiet = output({ json: () => true, wide: () => false, color: false });
    /** From each answer to the next question. */
    const gaps: number[] = [];
    const left: number[] = [];
    let answeredAt = 0;
    // Each answer held 120 ms, as a ?wait that ran out: more than the 50 ms pause.
    await waitUntil(quiet, 'deploy', async (leftMs) => {
      if (answeredAt) gaps.push(Date.now() - answeredAt);
      left.push(leftMs);
      await new Promise((r) => setTimeout(r, 120));
      answeredAt = Date.now();
      return { status: gaps.length < 2 ? 'deploying' : 'running', last_error: null };
    }, (v) => v.status !== 'deploying', 'running', 10_000);
    assert.equal(gaps.length, 2);
    assert.ok(gaps.every((g) => g < 40), `asked again as each held answer came, not 50 ms after it: ${JSON.stringify(gaps)}`);
    assert.ok(left.every((ms, i) => ms <= 10_000 && ms > 9_000 && (i === 0 || ms < (left[i - 1] ?? 0))), `the time left, shrinking: ${JSON.stringify(left)}`);
    // Quick answers: 50 ms from one question to the next.
    gaps.length = 0;
    answeredAt = 0;
    await waitUntil(quiet, 'deploy', () => {
      if (answeredAt) gaps.push(Date.now() - answeredAt);
      answeredAt = Date.now();
      return Promise.resolve({ status: gaps.length < 2 ? 'deploying' : 'running', last_error: null });
    }, (v) => v.status !== 'deploying', 'running', 10_000);
    assert.ok(gaps.every((g) => g >= 45), `paused between quick answers: ${JSON.stringify(gaps)}`);
  });

  test('a 429 while waiting is waited out (its Retry-After), not the command failing; other errors fail it', async () => {
    const quiet = output({ json: () => true, wide: () => false, color: false });
    let asked = 0;
    const started = Date.now();
    const done = await waitUntil(quiet, 'deploy', () => {
      asked++;
      if (asked === 2) return Promise.reject(new ApiError(429, 'rate limit exceeded', new Headers({ 'retry-after': '0.2' })));
      return Promise.resolve({ status: asked < 3 ? 'deploying' : 'running', last_error: null });
    }, (v) => v.status !== 'deploying', 'running', 10_000);
    assert.equal(done.status, 'running');
    assert.equal(asked, 3);
    assert.ok(Date.now() - started >= 200, 'after the wait the 429 named');
    await assert.rejects(
      waitUntil(quiet, 'deploy', () => Promise.reject(new ApiError(500, 'boom', new Headers())), () => true, 'running', 10_000),
      (err: unknown) => err instanceof ApiError && err.status === 500,
    );
    // 429s past the wait's time end it as any wait past its time does, not later.
    const t0 = Date.now();
    await assert.rejects(
      waitUntil(quiet, 'deploy', () => Promise.reject(new ApiError(429, 'rate limit exceeded', new Headers({ 'retry-after': '5' }))), () => true, 'running', 300),
      /deploy still unknown after 0 s \(it goes on/,
    );
    assert.ok(Date.now() - t0 < 2_000, `ended ${String(Date.now() - t0)} ms in`);
  });
});

describe("the CLI's start", () => {
  test('loading the client does not load TypeBox (0.2 s of every command): the limits come from a module without it', async () => {
    const probe = [
      "import { registerHooks } from 'node:module';",
      "registerHooks({ resolve(specifier, context, next) { if (specifier === 'typebox' || specifier.startsWith('typebox/')) throw new Error('typebox was loaded'); return next(specifier, context); } });",
      "const client = await import('@svc/client');",
      'console.log(client.SOURCE_ARCHIVE_MAX_BYTES > 0 && typeof client.SvcClient);',
    ].join('\n');
    const r = await run(process.execPath, ['--input-type=module', '-e', probe], { cwd: import.meta.dirname });
    assert.equal(r.stdout.trim(), 'function');
    // The probe itself can fail: the schemas do load TypeBox.
    await assert.rejects(run(process.execPath, ['--input-type=module', '-e', probe.replace("'@svc/client'", "'@svc/contract'")], { cwd: import.meta.dirname }), /typebox was loaded/);
  });
});

describe('the command tree', () => {
  const program = buildProgram();
  const commands = allCommands(program);
  const byPath = new Map(commands.map((c) => [commandPath(c), c]));

  test('every command has a description and an example in its --help, and every example names a command', () => {
    for (const c of commands) {
      const path = commandPath(c) || 'svc';
      assert.ok(c.description().length > 0 || c.commands.length > 0 || path === 'svc', `${path}: a description`);
      assert.ok(EXAMPLES[commandPath(c)], `${path}: an example`);
      let help = '';
      c.configureOutput({ writeOut: (s) => (help += s) });
      c.outputHelp();
      assert.match(help, /\nExamples?:\n {2}.*svc/, `${path}: the example is in --help`);
    }
    for (const key of Object.keys(EXAMPLES)) assert.ok(byPath.has(key), `the example of ${JSON.stringify(key)} names a command`);
  });

  test("every example's command and options exist", () => {
    const global = new Set(program.options.map((o) => o.long));
    for (const [key, lines] of Object.entries(EXAMPLES)) {
      for (const line of lines) {
        const words = line.replace(/#.*$/, '').replace(/^.*?\bsvc /, '').split(/\s+/).filter(Boolean);
        let cmd: Command = program;
        for (const w of words) {
          if (w === '--') break; // the rest is the remote command's
          const sub = cmd.commands.find((c) => c.name() === w || c.aliases().includes(w));
          if (sub && !w.startsWith('-')) cmd = sub;
          if (w.startsWith('-') && !w.startsWith('--')) {
            assert.ok(cmd.options.some((o) => o.short === w), `${JSON.stringify(line)} (${key}): ${w} is an option of ${commandPath(cmd) || 'svc'}`);
          } else if (w.startsWith('--')) {
            const flag = w.split('=')[0]!;
            assert.ok(global.has(flag) || cmd.options.some((o) => o.long === flag), `${JSON.stringify(line)} (${key}): ${flag} is an option of ${commandPath(cmd) || 'svc'}`);
          }
        }
        // A group's example runs one of its commands.
        if (key !== '') assert.ok(commandPath(cmd) === key || commandPath(cmd).startsWith(`${key} `), `${JSON.stringify(line)} runs ${key} or one of its commands (it runs ${commandPath(cmd)})`);
      }
    }
  });

  test('a command line builds only the group of the command it names, each command as the whole tree has it', () => {
    const helpOf = (c: Command) => {
      let help = '';
      c.configureOutput({ writeOut: (s) => (help += s) });
      c.outputHelp();
      return help;
    };
    const namesOf = (p: Command) => p.commands.flatMap((c) => [c.name(), ...c.aliases()]).sort();
    // Every command below svc is in one group (completion and commander's help build the whole tree).
    assert.deepEqual(namesOf(program), [...COMMAND_GROUPS.flatMap((g) => g.commands), 'completion'].sort());
    for (const group of COMMAND_GROUPS) {
      for (const name of group.commands) {
        const partial = buildProgram(['--json', name, 'list']);
        assert.deepEqual(namesOf(partial), [...group.commands].sort(), `svc ${name} builds its group: ${group.commands.join(', ')}`);
        for (const c of allCommands(partial).slice(1)) assert.equal(helpOf(c), helpOf(byPath.get(commandPath(c))!), `svc ${commandPath(c)} --help, built alone`);
      }
    }
    // Whatever names no group builds them all.
    for (const line of [[], ['help', 'deploy'], ['completion', 'bash'], ['-V'], ['--help'], ['deplyo'], ['--wide']]) {
      assert.equal(groupOf(line), undefined, JSON.stringify(line));
      assert.deepEqual(namesOf(buildProgram(line)), namesOf(program), JSON.stringify(line));
    }
    assert.equal(groupOf(['--wide', '--json', 'svc-deploy']), undefined);
    assert.equal(groupOf(['--wide', '--json', 'databases', 'list']), COMMAND_GROUPS.find((g) => g.commands.includes('db')));
  });

  test('bash completion completes commands, aliases, subcommands and options', async () => {
    const script = bashCompletion(program);
    const complete = async (...words: string[]) => {
      const cword = words.length - 1;
      const quoted = words.map((w) => `'${w}'`).join(' ');
      const r = await run('bash', ['-c', `${script}\nCOMP_WORDS=(${quoted}); COMP_CWORD=${cword}; _svc; printf '%s\\n' "\${COMPREPLY[@]}"`]);
      return r.stdout.trim().split('\n').filter(Boolean).sort();
    };
    assert.deepEqual(await complete('svc', 'ser'), ['service', 'services']);
    assert.deepEqual(await complete('svc', 'services', 're'), ['redeploy', 'rename', 'reset', 'restart']);
    assert.deepEqual(await complete('svc', 'service', 'cr'), ['create'], 'through an alias');
    assert.deepEqual(await complete('svc', '--json', 'services', 'create', 'web', '--i'), ['--image']);
    assert.deepEqual(await complete('svc', 'environments', 'previews', 'c'), ['create']);
    assert.deepEqual(await complete('svc', 'dep'), ['deploy', 'deployments'].filter((w) => w === 'deploy'));
    assert.ok((await complete('svc', '--')).includes('--wide'));
  });
});

describe('svc deploy: the upload and its build', () => {
  /** A client whose answers are given here, with the requests it sent. */
  const answering = (answers: Array<[number, unknown]>) => {
    const sent: string[] = [];
    const client = new SvcClient({
      baseUrl: 'http://svcd.test',
      apiKey: 'k',
      transport: (url, req) => {
        sent.push(`${req.method} ${url.pathname}${url.search}`);
        const [status, body] = answers.shift() ?? [500, { error: 'no more answers' }];
        return Promise.resolve(new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } }));
      },
    });
    return { client, sent };
  };
  const archive = new Uint8Array([1, 2, 3]);
  const queued = { build_id: 'b1', status: 'queued', image: 'svc/t/s:b1' };
  const upload = { id: 'u1', service_id: 's1', size_bytes: 3, sha256: 'f'.repeat(64), files: 1, unpacked_bytes: 1, created_at: 1, expires_at: 2 };

  test('one request when svcd queues the build with the upload', async () => {
    const { client, sent } = answering([[201, { ...upload, build: queued }]]);
    assert.deepEqual(await uploadAndBuild(client, 's1', archive), queued);
    assert.deepEqual(sent, ['POST /v1/services/s1/sources?build=true']);
  });

  test('an svcd that answers the upload alone (from before ?build=true) is asked for the build', async () => {
    const { client, sent } = answering([
      [201, upload],
      [202, queued],
    ]);
    assert.deepEqual(await uploadAndBuild(client, 's1', archive), queued);
    assert.deepEqual(sent, ['POST /v1/services/s1/sources?build=true', 'POST /v1/services/s1/builds']);
  });
});
