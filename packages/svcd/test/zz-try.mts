import { startHttpsGitServer } from './git-fixtures.js';
const s = await startHttpsGitServer();
console.log(s.url('project'), s.caFile);
await new Promise((r) => setTimeout(r, 20000));
await s.stop();
